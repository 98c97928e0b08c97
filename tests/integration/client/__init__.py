"""Integration tests of pgqueue/client/, per stage."""
