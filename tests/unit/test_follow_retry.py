"""The follow reader survives what a poll may meet and retries it: a lost connection, and a
deadlock with a promotion taking the node row (then the next poll sees the promotion)."""
from __future__ import annotations

import pytest

import pgqueue
from pgqueue.replicas.follow import Follower


@pytest.mark.parametrize("error", [pgqueue.Contention("deadlock detected"),
                                   pgqueue.ConnectionFailed("server closed the connection")])
def test_a_failed_poll_is_retried_until_the_promotion_stops_the_follower(
        error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    follower = Follower("host=leader", "host=replica", "r1", poll_interval=0.01)
    answers: list[int | Exception] = [error, -1]
    polls: list[int] = []

    def poll() -> int:
        polls.append(1)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(follower, "poll", poll)
    follower.run(setup=False)  # returns: the second poll saw the promotion
    assert len(polls) == 2 and answers == []


def test_any_other_error_stops_the_follower(monkeypatch: pytest.MonkeyPatch) -> None:
    follower = Follower("host=leader", "host=replica", "r1", poll_interval=0.01)

    def poll() -> int:
        raise pgqueue.InvalidState("the replica's op log diverged")

    monkeypatch.setattr(follower, "poll", poll)
    with pytest.raises(pgqueue.InvalidState):
        follower.run(setup=False)
