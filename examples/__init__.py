"""Example apps for pgqueue (used by docker-compose.yml)."""
