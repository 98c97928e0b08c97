"""The worker runtime: the App and its handlers, leasing, renewal, settling, steps, the Worker.
May import: core, db, telemetry, client, maintenance."""
