"""`python -m streamctl.stack ...`: the stack commands without the root streamctl CLI."""

import sys

from streamctl.stack.cli import main

sys.exit(main(["stack", *sys.argv[1:]]))
