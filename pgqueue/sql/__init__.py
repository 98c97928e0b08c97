"""Runtime SQL, one file per lifecycle stage, as `-- name:` blocks (see pgqueue.queries)."""
