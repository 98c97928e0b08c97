"""Integration tests of pgqueue/replicas/, per stage."""
