"""The queue client: Queue and AsyncQueue, and the stage modules they call (enqueue, lease, settle...).
May import: core, db, telemetry."""
