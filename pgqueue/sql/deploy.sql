-- deploy: what new code would do to the jobs already in the database (pgqueue deploy-check).
-- Read-only; no schema objects of its own.

-- name: deploy_check_groups
-- The jobs new code may run (pending, scheduled, leased, quarantined), grouped by what the
-- compatibility rule reads (kind, payload version, recorded step list, completed step, step in
-- progress), with their ids: the rule is decided once per group, and no payload is read. One
-- pass over the job table (an operator's command, not a hot path).
SELECT stream, kind, schema_version, step_set_hash, last_completed_step, cursor_step,
       array_agg(id ORDER BY id) AS job_ids, array_agg(state ORDER BY id) AS states
FROM pgqueue.job
WHERE state IN ('pending', 'scheduled', 'leased', 'quarantined')
  AND (%(streams)s::text[] IS NULL OR stream = ANY (%(streams)s::text[]))
GROUP BY stream, kind, schema_version, step_set_hash, last_completed_step, cursor_step

-- name: deploy_streams
-- The streams holding jobs in flight (pending, scheduled, leased, quarantined) of the given
-- kinds: what deploy-check reads by default (another app's streams are not its to judge).
SELECT DISTINCT stream FROM pgqueue.job
WHERE state IN ('pending', 'scheduled', 'leased', 'quarantined') AND kind = ANY (%(kinds)s::text[])
ORDER BY stream

-- name: step_sets_by_hash
-- Recorded step lists by hash, for the hashes asked.
SELECT hash, steps FROM pgqueue.step_set WHERE hash = ANY (%(hashes)s::text[])
