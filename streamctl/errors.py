"""The `streamctl` command's error: one whose message tells the user what to do.

`cli.main` prints it without a traceback and exits 1. Neighbours: the commands in this package
raise it; `streamctl.stack.errors.StackError` is the local stack's own, also printed as is.
"""

from __future__ import annotations


class UserFacingError(Exception):
    """An error whose message tells the user what to do; printed without a traceback."""
