"""Check a commit message against the house rule: a subject line of at most 72 characters,
then (when there is more to say) a blank line and the details in the body.

    python tools/commit_msg.py FILE    # the commit-msg hook (.githooks/commit-msg) runs this
    python tools/commit_msg.py --since REV   # every commit after REV (the test suite)

Install the hook once per clone: `git config core.hooksPath .githooks` (`make hooks`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: The longest subject line `git log --oneline` shows whole beside its hash.
MAX_SUBJECT = 72
#: The first commit after which the rule holds (the older history is kept as it was).
SINCE = "a6acfd74ca8bb89f27f39000525016bb1578e55d"


def problems(message: str) -> list[str]:
    """What is wrong with a commit message, one sentence each (empty when it is fine)."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    subject, found = lines[0], []
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject is {len(subject)} characters, over {MAX_SUBJECT}: "
                     "put the details in the body, after a blank line")
    if subject != subject.strip():
        found.append("the subject starts or ends with white space")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank: one subject line, a blank line, then the body")
    return found


def commits_since(rev: str, repo: Path) -> dict[str, str]:
    """{short hash: message} of every commit after rev on HEAD (none when rev is unknown,
    as in a shallow clone that does not reach it)."""
    known = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=repo,
                           capture_output=True, check=False)
    if known.returncode != 0:
        return {}
    out = subprocess.run(["git", "log", "--format=%h%x00%B%x01", f"{rev}..HEAD"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for entry in out.split("\x01"):
        if "\x00" in entry:
            short, body = entry.strip("\n").split("\x00", 1)
            found[short] = body
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/commit_msg.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="the message file git gives the commit-msg hook")
    parser.add_argument("--since", metavar="REV", help="check every commit after REV instead")
    args = parser.parse_args(argv)
    if args.since:
        bad = {h: p for h, m in commits_since(args.since, Path.cwd()).items() if (p := problems(m))}
        for short, found in bad.items():
            print(f"{short}: {'; '.join(found)}", file=sys.stderr)
        return 1 if bad else 0
    if not args.file:
        parser.error("give the message FILE or --since REV")
    found = problems(Path(args.file).read_text(encoding="utf-8"))
    for problem in found:
        print(f"commit-msg: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
