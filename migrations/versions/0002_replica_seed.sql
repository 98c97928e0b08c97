-- pgqueue 0002: a replica can be seeded from its leader's state when the leader pruned its op
-- log. (This revision's code also made the SQL helpers inlinable, wrote one op body per lease
-- and ack call, locked rows in id order in ack and renew, and proved a logical replica's
-- position in replica_status: see versions/code/0002.sql.)

-- A replica seeded from the leader's state: the leader snapshot the state was copied in, and
-- the leader's pruned_through then. An op whose transaction that snapshot saw committed is
-- already in the copied state: it is logged, never applied again.
ALTER TABLE pgqueue.node ADD COLUMN seed_snapshot pg_snapshot,
                         ADD COLUMN seeded_through bigint NOT NULL DEFAULT 0;
