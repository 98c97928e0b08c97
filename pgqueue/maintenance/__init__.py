"""Maintenance: the periodic passes (reclaim, cron ticks, prune, vacuum) and the runner election.
May import: core, db, telemetry, client, replicas."""
