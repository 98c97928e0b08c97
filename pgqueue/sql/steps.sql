-- steps: Step sets: the declared, ordered steps behind a step job's checkpoint.

-- schema: tables ----------------------------------------------------------------------------
-- The ordered step list behind each step-set hash, so a resumed job's recorded steps can be
-- compared with the code's (hash of ordered step names and versions, never of source).
CREATE TABLE pgqueue.step_set (
    hash       text PRIMARY KEY,
    kind       text NOT NULL,
    steps      jsonb NOT NULL,  -- [{"name": ..., "version": ...}, ...] in order
    created_at timestamptz NOT NULL
);

-- schema: functions -------------------------------------------------------------------------

-- The ordered step names of a step set (NULL when unknown).
CREATE OR REPLACE FUNCTION pgqueue.step_names(p_hash text) RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT array_agg(e ->> 'name' ORDER BY o)
    FROM pgqueue.step_set s, jsonb_array_elements(s.steps) WITH ORDINALITY AS t(e, o)
    WHERE s.hash = p_hash
$$;

-- Record a step set (once per hash).
CREATE OR REPLACE FUNCTION pgqueue.register_step_set(p_hash text, p_kind text, p_steps jsonb) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    INSERT INTO pgqueue.step_set (hash, kind, steps, created_at)
    VALUES (p_hash, p_kind, p_steps, v_now)
    ON CONFLICT (hash) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES ('', 'RegisterStepSet', jsonb_build_object('hash', p_hash, 'kind', p_kind,
            'steps', p_steps, 'created_at_ms', pgqueue.to_ms(v_now)));
    RETURN true;
END
$$;
