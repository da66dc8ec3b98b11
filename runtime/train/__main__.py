"""``python -m moeforge.runtime.train``: the entry point launch scripts, plans and docs name."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
