-- name: dead_letters
-- The dead letters of a stream, most recently died first.
SELECT * FROM pgqueue.jobs WHERE state = 'dead' AND stream = %(stream)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: requeue_dead_letter
-- Back to pending with attempts reset; PQ404 when not a dead letter, PQ409 on a dedup holder.
SELECT pgqueue.requeue_dead_letter(%(job_id)s::bigint)
