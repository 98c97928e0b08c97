# DO NOT EDIT: generated from pgqueue/db/failover_async.py by tools/generate.py; edit that file.
"""Failover for the public API: which calls may run again after a replica refused them or a
connection was lost, and moving to the leader among several DSNs.

Shared by the methods of AsyncQueue (client/queue_async.py) and Queue (client/queue.py, generated from it;
queue_operate.py) so that every call follows one rule.
"""
from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from pgqueue.errors import ConnectionFailed, NotLeader

R = TypeVar("R")
#: A Queue method: the decorator keeps its signature, so callers' arguments are type-checked.
M = TypeVar("M", bound=Callable[..., Any])


def follow_leader(*, idempotent: bool, token: bool = False, flag_retry: bool = False
                  ) -> Callable[[M], M]:
    """Given several DSNs, a call refused because its database turned out to be a replica
    moves to the leader and runs again (a refused write changed nothing, so this is safe).

    A call whose connection was lost while it ran may have committed. It runs again (on the
    new leader, if there is one) only when running it twice cannot apply it twice:
    `idempotent` calls (reads, fenced renewals, passes), calls that carry a request `token`
    the server remembers (enqueue, lease: the re-sent call returns what the first attempt
    did), and fenced settles that are told they are re-sent (`flag_retry`: an ack or nack
    whose first attempt committed still reports its outcome). Any other call raises
    ConnectionFailed saying it may have committed. A call on the caller's own connection
    (`conn=`) is never re-run: its transaction is the caller's.
    """

    def decorate(method: M) -> M:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if token:
                kwargs["_request"] = uuid.uuid4()  # the same token for every attempt
            try:
                return method(self, *args, **kwargs)
            except NotLeader:
                if not self._move_to_leader():
                    raise
                return method(self, *args, **kwargs)
            except ConnectionFailed as exc:
                if kwargs.get("conn") is not None:
                    raise
                if exc.retryable:
                    # The server ended the session before the statement ran (a restart): a
                    # fresh connection, or the new leader, runs it.
                    self._move_to_leader()
                    if token:
                        kwargs["_resent"] = True
                    return method(self, *args, **kwargs)
                if not (idempotent or token or flag_retry):
                    raise ConnectionFailed(
                        f"{exc}; {method.__name__} may have committed before the connection "
                        f"was lost: check its effect before calling it again",
                        retryable=False, may_have_committed=True) from exc
                self._move_to_leader()
                if flag_retry:
                    kwargs["_retried"] = True
                if token:
                    kwargs["_resent"] = True
                return method(self, *args, **kwargs)

        return cast(M, wrapper)

    return decorate
