"""Integration tests of pgqueue/telemetry/, per stage."""
