"""Integration tests of pgqueue/contrib/, per stage."""
