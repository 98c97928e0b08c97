"""Integration tests of pgqueue/dashboard/, per stage."""
