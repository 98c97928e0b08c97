"""`python -m pgqueue` runs the pgqueue command line (the pgqueue_cli package)."""
from __future__ import annotations

from importlib import import_module

if __name__ == "__main__":
    import_module("pgqueue_cli").main()
