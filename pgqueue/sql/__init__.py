"""Runtime SQL and the current schema, one file per lifecycle stage, as `-- name:` blocks.
May import: nothing."""
