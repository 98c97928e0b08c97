"""Integration tests of pgqueue/db/, per stage."""
