"""Integration tests of pgqueue/runtime/, per stage."""
