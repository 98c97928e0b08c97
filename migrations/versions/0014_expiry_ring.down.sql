-- Undo 0014's tables: reclaim reads every leased job again (0013's code).
DROP TABLE pgqueue.lease_expiry;
