"""Large payloads in the CLI (issue 11, part of break 3): every view shows a preview of the
payload (its first PREVIEW_BYTES bytes, cut by the database) and its size; --full shows the
whole, exactly as before.
"""
from __future__ import annotations

import base64
import time

import pgqueue
from pgqueue.client import observe
from tests.acceptance.clihelp import as_json, ok, run

MIB = 1 << 20
PREVIEW = observe.PREVIEW_BYTES


def big_text(size: int) -> bytes:
    """`size` bytes of UTF-8 text with a two-byte character straddling the preview's end,
    so a preview cut there must drop the half character, not turn into base64."""
    head = b"a" * (PREVIEW - 1) + "é".encode()  # bytes PREVIEW-1 and PREVIEW: one character
    body = b"0123456789abcdef" * (size // 16 + 1)
    return (head + body)[:size]


def dead_big_job(dsn: str, payload: bytes) -> int:
    with pgqueue.Queue(dsn, stream="big") as q:
        if len(payload) > 16 * MIB:  # over a stream's default limit
            q.configure_stream(max_payload_bytes=len(payload))
        job_id = q.enqueue(payload, kind="blob", max_attempts=1)
        (lease,) = q.lease()
        assert q.nack(lease, error="too big") is True
    return job_id


def test_jobs_show_previews_a_large_payload_and_full_shows_it_all(dsn: str) -> None:
    payload = big_text(3 * MIB)
    job_id = dead_big_job(dsn, payload)

    shown = as_json(dsn, "jobs", "show", str(job_id))
    assert (shown["payload_size"], shown["payload_truncated"]) == (3 * MIB, True)
    assert shown["payload_encoding"] == "utf-8"
    assert shown["payload"] == "a" * (PREVIEW - 1)  # the cut character is dropped
    assert len(ok(dsn, "jobs", "show", str(job_id), "--json").stdout) < 6000

    people = run(dsn, "jobs", "show", str(job_id), env={"COLUMNS": "200"}).stdout
    assert "3,145,728 bytes (showing the first 1,000; --full shows all)" in people
    assert len(people) < 10_000

    full = as_json(dsn, "jobs", "show", str(job_id), "--full")
    assert full["payload"].encode() == payload
    assert (full["payload_size"], full["payload_truncated"]) == (3 * MIB, False)
    people_full = ok(dsn, "jobs", "show", str(job_id), "--full").stdout
    assert payload.decode() in people_full and "payload (3,145,728 bytes, utf-8):" in people_full


def test_every_job_view_previews_and_full_returns_the_payload(dsn: str) -> None:
    payload = big_text(2 * MIB)
    job_id = dead_big_job(dsn, payload)
    for args in (["jobs", "inspect", str(job_id)], ["dead", "show", str(job_id)]):
        assert len(ok(dsn, *args).stdout) < 10_000, args
        shown = as_json(dsn, *args)
        assert (shown["payload_size"], shown["payload_truncated"]) == (2 * MIB, True)
        assert len(shown["payload"]) < PREVIEW
        assert as_json(dsn, *args, "--full")["payload"].encode() == payload
    for args in (["jobs", "list"], ["dead", "list"], ["dead", "list", "--stream", "big"]):
        assert len(ok(dsn, *args).stdout) < 5000, args
        (row,) = as_json(dsn, *args)
        assert (row["job_id"], row["payload_size"], row["payload_truncated"]) == (
            job_id, 2 * MIB, True)
        assert payload.decode().startswith(row["payload"]) and len(row["payload"]) < PREVIEW
        (whole,) = as_json(dsn, *args, "--full")
        assert whole["payload"].encode() == payload and whole["payload_truncated"] is False


def test_oplog_tail_previews_enqueue_bodies(dsn: str) -> None:
    payload = bytes(range(256)) * (MIB // 256)  # binary: base64 in the body
    with pgqueue.Queue(dsn, stream="big") as q:
        job_id = q.enqueue(payload, kind="blob")
    assert len(ok(dsn, "oplog", "tail").stdout) < 5000
    (op,) = as_json(dsn, "oplog", "tail", "--job", str(job_id))
    assert (op["op"], op["payload_size"], op["payload_truncated"]) == ("Enqueue", MIB, True)
    assert base64.b64decode(op["body"]["payload"]) == payload[:PREVIEW]
    (whole,) = as_json(dsn, "oplog", "tail", "--job", str(job_id), "--full")
    assert base64.b64decode(whole["body"]["payload"]) == payload
    assert {k: v for k, v in whole["body"].items() if k != "payload"} == \
        {k: v for k, v in op["body"].items() if k != "payload"}


def test_a_64_mib_job_is_shown_without_fetching_it(dsn: str) -> None:
    """Every view of a 64 MiB job prints a few kilobytes (each took well under a second here;
    the bound on the whole test is generous and only catches a view that fetches it all)."""
    payload = b"\x00\xff" * (32 * MIB)
    job_id = dead_big_job(dsn, payload)
    started = time.monotonic()
    for args in (["jobs", "show", str(job_id)], ["jobs", "show", str(job_id), "--json"],
                 ["jobs", "inspect", str(job_id)], ["jobs", "list"], ["dead", "list"],
                 ["dead", "show", str(job_id)], ["oplog", "tail"], ["oplog", "tail", "--json"]):
        out = ok(dsn, *args).stdout
        assert len(out) < 10_000, (args, len(out))
    shown = as_json(dsn, "jobs", "show", str(job_id))
    assert (shown["payload_size"], shown["payload_truncated"]) == (64 * MIB, True)
    assert shown["payload_encoding"] == "base64"
    assert base64.b64decode(shown["payload"]) == payload[:PREVIEW]
    assert time.monotonic() - started < 120
