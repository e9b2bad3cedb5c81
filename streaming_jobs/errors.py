"""The job process's errors: one root, keyed to what the caller does next.

Every error the job runtime (and the public job API) raises on purpose is a `JobError`, in
one of five families, each meaning one next step:

- `UserError` — fix what the message names (an option, the job's code or declaration, the
  checkpoint, a file) and start again; retrying as is changes nothing. `job run` prints it and
  exits 2.
- `TemporaryError` — Kafka (or Spark) is away for a while: retry after `delay_s`; nothing was
  lost or written twice. The supervisor restarts the query, within a budget.
- `RequestRefused` — a requested change was not applied and nothing changed: answer the
  requester (an ack `REJECTED`) and carry on unchanged.
- `ChangeFailed` — a change was attempted, failed, and the previous state is back in force:
  answer `FAILED` and carry on.
- `Fenced` — another instance owns the query now: write nothing more, step down.

Neighbours: everything in `streaming_jobs` raises these; `cli` and `runtime.roles.supervise`
act on the families.
"""

from __future__ import annotations


class JobError(Exception):
    """The root of the job process's errors."""


class UserError(JobError, ValueError):
    """Fix what the message names and start again."""


class TemporaryError(JobError):
    """Retry after `delay_s`: what failed will work again when Kafka or Spark is back."""

    delay_s: float = 10.0


class RequestRefused(JobError):
    """The change was not applied; nothing changed."""


class ChangeFailed(JobError):
    """The change failed and was rolled back: the previous state is in force."""


class Fenced(JobError):
    """Another instance owns the query: step down, write nothing more."""
