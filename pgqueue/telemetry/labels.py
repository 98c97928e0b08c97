"""Label values of pgqueue's metrics: few, and printable.

A label value is a time series for as long as the process lives, so only a bounded set may
become one: a worker labels the kinds its App registers (any other as UNKNOWN_KIND: a
producer enqueuing random kinds grew one worker's /metrics to 13,201 lines), and `pgqueue
metrics serve` the MAX_STREAMS streams with the most jobs (the rest as OTHER_STREAMS). Job
data may hold control characters (ESC, BEL), which a label value never does: they are
spelt out.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

#: The label of a job of a kind the worker's App has no handler for.
UNKNOWN_KIND = "<unknown>"
#: The label of the streams past MAX_STREAMS, summed.
OTHER_STREAMS = "<other>"
#: The most streams `pgqueue metrics serve` labels one by one.
MAX_STREAMS = 100

_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}


def printable(value: str) -> str:
    """`value` with its control characters spelt out (ESC as \\x1b): what a scrape shows."""
    return value.translate(_CONTROLS)


def kind_label(kind: str | None, known: Collection[str]) -> str:
    """A job's kind as a worker labels it: its App's kinds as they are, any other as one."""
    if kind is None:
        return ""
    return printable(kind) if kind in known else UNKNOWN_KIND


def stream_labels(jobs_by_stream: Mapping[str, int], limit: int = MAX_STREAMS
                  ) -> dict[str, str]:
    """The label of each stream: its name for the `limit` streams with the most jobs (ties by
    name), OTHER_STREAMS for the rest."""
    ranked = sorted(jobs_by_stream, key=lambda s: (-jobs_by_stream[s], s))
    kept = set(ranked[:limit])
    return {s: printable(s) if s in kept else OTHER_STREAMS for s in jobs_by_stream}
