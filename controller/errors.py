"""The controller process's errors: one root, keyed to what the caller does next.

- `UserError` — fix what the message names (a setting, the control key, a topic that is not
  there) and start again; `controller run` prints it and exits 2.
- `TemporaryError` — a write did not reach the broker: the loop logs it and tries again after
  the query's cooldown; nothing is lost (the tuple is re-sent, the decision re-logged).

Neighbours: `settings`, `kafka.clients`, `loop.ports` raise these; `cli` and `loop.cycle` act
on them.
"""

from __future__ import annotations


class ControllerError(Exception):
    """The root of the controller's errors."""


class UserError(ControllerError, ValueError):
    """Fix what the message names and start again."""


class TemporaryError(ControllerError):
    """Try again after the cooldown."""
