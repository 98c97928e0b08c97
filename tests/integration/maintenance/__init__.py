"""Integration tests of pgqueue/maintenance/, per stage."""
