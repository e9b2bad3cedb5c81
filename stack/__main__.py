"""`python -m stack ...`: the stack commands without the root streamctl CLI."""

import sys

from stack.cli import main

sys.exit(main(["stack", *sys.argv[1:]]))
