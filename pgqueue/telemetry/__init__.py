"""Telemetry: the database's gauges, Prometheus metrics, OpenTelemetry traces, JSON log lines.
May import: core, db."""
