"""Integrations with frameworks (optional: none is needed to import pgqueue).
May import: core, client."""
