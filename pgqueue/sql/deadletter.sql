-- name: dead_letters
-- The newest dead letters of a stream.
SELECT * FROM pgqueue.jobs WHERE state = 'dead' AND stream = %(stream)s
ORDER BY id DESC LIMIT %(limit)s

-- name: requeue_dead_letter
-- Back to pending with attempts reset; PQ404 when not a dead letter, PQ409 on a dedup holder.
SELECT pgqueue.requeue_dead_letter(%(job_id)s)
