"""Replicas: attach a database to a leader's op log, follow it, seed it, verify, promote.
May import: core, db, client, telemetry."""
