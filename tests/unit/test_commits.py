"""Commit messages keep the house rule (tools/commit_msg.py): a subject of at most 72
characters, a blank line, then the body. The hook refuses a bad message before it is
committed; this check catches a commit made without the hook."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools import commit_msg

REPO = Path(__file__).resolve().parents[2]


def test_every_commit_since_the_rule_has_a_short_subject() -> None:
    if not (REPO / ".git").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs from a clone: its history must be there to check")
        pytest.skip("not a git checkout")
    commits = commit_msg.commits_since(commit_msg.SINCE, REPO)
    bad = {short: found for short, message in commits.items()
           if (found := commit_msg.problems(message))}
    assert bad == {}


def test_the_rule_names_what_is_wrong() -> None:
    assert commit_msg.problems("Lease: renew in one statement\n\nWhy, at length.\n") == []
    assert commit_msg.problems("# only a comment\n\n") == ["the message is empty"]
    (long,) = commit_msg.problems("x" * 73)
    assert "73 characters, over 72" in long
    (glued,) = commit_msg.problems("Subject\nbody right under it")
    assert "second line is not blank" in glued


def test_the_hook_refuses_a_long_subject_in_a_real_commit(tmp_path: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False)

    git("init", "-q")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "commit_msg.py").write_bytes((REPO / "tools/commit_msg.py").read_bytes())
    git("config", "core.hooksPath", str(REPO / ".githooks"))
    (tmp_path / "f").write_text("x")
    git("add", "f")
    refused = git("commit", "-q", "-m", "A subject that goes on " + "and on " * 10)
    assert refused.returncode != 0 and "over 72" in refused.stderr
    assert git("rev-parse", "-q", "--verify", "HEAD").returncode != 0
    taken = git("commit", "-q", "-m", "A short subject", "-m", "The details, in the body.")
    assert taken.returncode == 0, taken.stderr
