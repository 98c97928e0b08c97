"""Every Python and shell example of the documentation runs, page by page, as a reader would
run it: in a folder of the page's own, against a fresh migrated database ($PGQUEUE_DSN, and
`dsn` in Python), in the order the page gives them (tests/docs/examples.py says how each kind
of block is run). A page passes when each of its examples exits 0 and each command it starts
in the background still runs at the page's end; the docs cannot drift from the code."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.docs.examples import ROOT, RUN, Block, blocks, checked_lines, pages
from tests.pgbed import Bed

PRELUDE = "import os\ndsn = os.environ['PGQUEUE_DSN']\n"
TIMEOUT = 120


def url(dsn: str) -> str:
    """The DSN as a URL (postgresql://user@host:port/db), the form the docs show."""
    p = conninfo_to_dict(dsn)
    return f"postgresql://{p.get('user', 'postgres')}@{p['host']}:{p['port']}/{p['dbname']}"


def runnable(page: Path) -> bool:
    return any(b.lang in RUN and not b.included for b in blocks(page))


def _show(block: Block, out: str) -> str:
    return f"the example at {block.where} failed:\n{block.code}\n--- its output ---\n{out[-4000:]}"


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pgid: int) -> None:
    """SIGTERM a background command's group, then SIGKILL what is left after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while _alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for the group to exit, with a deadline


@pytest.mark.parametrize("page", [p for p in pages() if runnable(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_examples_of_a_page_run(page: Path, bed: Bed, tmp_path: Path) -> None:
    leader, replica = bed.new_database(), bed.new_database(migrated=False)
    env = {**os.environ, "PGQUEUE_DSN": url(leader), "LEADER": url(leader),
           "REPLICA": url(replica),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PGQUEUE_DEBUG", None)
    background: list[tuple[Block, int]] = []
    try:
        for block in blocks(page):
            if block.lang not in RUN or block.included:
                continue
            log = tmp_path / f".output-{block.line}.txt"
            if block.title:
                target = tmp_path / block.title
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code)
                if target.suffix != ".py":
                    continue
                # a module the reader saves: importing it runs its definitions
                args = [sys.executable, "-c", f"import runpy; runpy.run_path({str(target)!r})"]
            elif block.lang == "python":
                script = tmp_path / f".example-{block.line}.py"
                script.write_text(PRELUDE + block.code)
                args = [sys.executable, str(script)]
            else:
                code, wrong = checked_lines(block.code)
                assert not wrong, f"{block.where}: " + "; ".join(wrong)
                args = ["bash", "-e", "-o", "pipefail", "-c", code]
            with log.open("w") as out:
                proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    proc.wait(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    _stop(proc.pid)
                    raise AssertionError(_show(block, log.read_text()) + "\n(timed out)") from None
            assert proc.returncode == 0, _show(block, log.read_text())
            if any(line.rstrip().endswith("&") for line in block.code.splitlines()):
                background.append((block, proc.pid))
        for block, pgid in background:
            log = tmp_path / f".output-{block.line}.txt"
            assert _alive(pgid), (f"the command started in the background at {block.where} "
                                  f"exited before the page's end:\n{log.read_text()[-4000:]}")
    finally:
        for _, pgid in background:
            _stop(pgid)
        bed.drop(leader)
        bed.drop(replica)


def test_every_yaml_example_parses() -> None:
    """Configuration shown in the docs (alert rules, compose files) is valid YAML."""
    import yaml

    found = [b for p in pages() for b in blocks(p) if b.lang in ("yaml", "yml")]
    assert found, "the docs show alert rules in YAML"
    for block in found:
        try:
            yaml.safe_load(block.code)
        except yaml.YAMLError as exc:
            raise AssertionError(f"{block.where}: not YAML: {exc}") from exc
