"""`python -m pgqueue` runs the pgqueue command line."""
from __future__ import annotations

from pgqueue_cli import main

if __name__ == "__main__":
    main()
