"""``python -m moeforge.runtime.data_prepare``: the command in runtime/data_prepare/command.py."""
import sys

from moeforge.runtime.data_prepare.command import main

if __name__ == "__main__":
    sys.exit(main())
