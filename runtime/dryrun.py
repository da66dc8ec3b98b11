"""``python -m moeforge.runtime.dryrun PLAN.json --rank R``: the entry point's name; the dry run is
model/dryrun.py (one rank's shard built on the meta device)."""

from .model.dryrun import main

if __name__ == "__main__":
    raise SystemExit(main())
