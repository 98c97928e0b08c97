"""Running pgqueue across a Citus cluster: where streams live, and moving them (placement).
May import: core, db."""
