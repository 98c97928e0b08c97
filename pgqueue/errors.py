"""The errors pgqueue raises.

Everything that goes wrong on the database side derives from PgQueueError, so a caller can
catch one class. Bad arguments raise ValueError or TypeError naming the argument instead.
"""
from __future__ import annotations


class PgQueueError(Exception):
    """Base of every database-side error pgqueue raises."""


class ConnectionFailed(PgQueueError):
    """The database could not be reached. The message names host and port, never a password.

    `retryable` is True when the server ended the session before running the statement (a
    restart or an administrator's command), so running it again cannot apply it twice.
    `may_have_committed` is True when the connection was lost while a call that is not safe to
    repeat ran: it may have taken effect; check before calling it again. `permanent` is True
    when the server answered but refused the connection for a reason waiting will not mend
    (the database or the role does not exist, authentication failed): a misconfiguration, not
    an outage, so a worker stops instead of retrying. `waited` is True when the call waited its
    whole connect timeout for a connection: one tried again at once waits as long again (and
    gets a connection the moment the server is back), so a retry loop need not pause first."""

    def __init__(self, message: str, *, retryable: bool = False,
                 may_have_committed: bool = False, permanent: bool = False,
                 waited: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.may_have_committed = may_have_committed
        self.permanent = permanent
        self.waited = waited


class Contention(PgQueueError):
    """Postgres rolled the statement back to break a deadlock or a serialization conflict
    (SQLSTATE 40P01 / 40001), or because a limit the user set ran out (statement_timeout,
    lock_timeout: the message names it): nothing was written, and running it again is safe."""


class SchemaError(PgQueueError):
    """The pgqueue schema is missing, older or newer than this library."""


class SchemaMissing(SchemaError):
    """The database has no pgqueue schema (or an older one): run `pgqueue db upgrade`."""


class SchemaTooNew(SchemaError):
    """The database was migrated by a newer pgqueue than this one."""


class LeaseLost(PgQueueError):
    """The lease is no longer current (reclaimed, acked or nacked): the write changed nothing."""


class JobNotFound(PgQueueError):
    """No job with that id in the set the operation works on."""


class DedupConflict(PgQueueError):
    """A live job already holds the dedup key; `holder` is its id when known."""

    def __init__(self, message: str, holder: int | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class NotLeader(PgQueueError):
    """The database is a replica and refuses queue writes."""


class PermissionDenied(PgQueueError):
    """The connected role may not make this call: `role` is the pgqueue role it needs
    (pgqueue_reader, pgqueue_producer, pgqueue_worker or pgqueue_operator; None when no pgqueue
    role may, as for a direct write to a table). An administrator grants it with `pgqueue db
    grant ROLE --to LOGIN`."""

    def __init__(self, message: str, role: str | None = None) -> None:
        super().__init__(message)
        self.role = role


class InvalidState(PgQueueError):
    """The job is in a state where the operation makes no sense (e.g. releasing a pending job)."""


class Cancelled(BaseException):
    """An operator cancelled the job while its handler ran (`Queue.cancel`, `pgqueue jobs
    cancel`, the dashboard): raised in the handler at its next `ctx.advance()` or step
    boundary; the worker then ends the job as cancelled, never retried. A handler may raise it
    itself to end its job the same way.

    A BaseException, as asyncio.CancelledError is: a handler's `except Exception:` around its
    work must not swallow the request to stop."""


class JobTimeout(BaseException):
    """A job ran past its time limit (`app.job(timeout=...)`, a step's own `timeout`, or the
    one given at enqueue). A plain handler gets it at its next `ctx.advance()`,
    `ctx.check_cancelled()` or step boundary; an async handler's task is cancelled instead. The
    worker records the failure as `JobTimeout: ...` and the job is retried by its policy (a
    step job's completed steps stay completed). A BaseException, as Cancelled is: a handler's
    `except Exception:` must not swallow it.

    :param stack: where the handler was when the worker stopped waiting for it (a plain handler
        still running at the end of the grace period), recorded as the failure's traceback.
    """

    def __init__(self, message: str, *, stack: str | None = None) -> None:
        super().__init__(message)
        self.stack = stack
