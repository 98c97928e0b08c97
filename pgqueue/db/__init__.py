"""Database access: the named queries and where they run, connections, DSNs, schema, roles, embedded server.
May import: core."""
