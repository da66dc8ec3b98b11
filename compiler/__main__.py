import sys

from moeforge.compiler.cli import main

sys.exit(main())
