-- pgqueue 0006: the tables' delta (state only).

-- 16 least privilege: the roles (the same statement as pgqueue/sql/access.sql's tables; the
-- grants are code, reloaded with it).
-- The roles (once per server; NOLOGIN: they are granted to login roles, never used to log in)
-- and what each includes. Creating them needs CREATEROLE; without it the install stops,
-- naming the statements an administrator runs first.
DO $$
DECLARE
    v_role text;
    v_member text;
    v_missing text[] := '{}';
BEGIN
    FOREACH v_role IN ARRAY ARRAY['pgqueue_reader', 'pgqueue_producer', 'pgqueue_worker',
                                  'pgqueue_operator'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;  -- another install made it
            WHEN insufficient_privilege THEN v_missing := v_missing || v_role;
        END;
    END LOOP;
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION 'the pgqueue roles % do not exist and this role may not create them',
            array_to_string(v_missing, ', ')
            USING ERRCODE = '42501',
                  HINT = 'an administrator runs: CREATE ROLE pgqueue_reader NOLOGIN; CREATE ROLE pgqueue_producer NOLOGIN; CREATE ROLE pgqueue_worker NOLOGIN; CREATE ROLE pgqueue_operator NOLOGIN; GRANT pgqueue_reader TO pgqueue_producer; GRANT pgqueue_producer TO pgqueue_worker; GRANT pgqueue_worker TO pgqueue_operator; (WITH ADMIN OPTION to the schema owner, so it may grant them)';
    END IF;
    FOR v_role, v_member IN VALUES ('pgqueue_reader', 'pgqueue_producer'),
                                   ('pgqueue_producer', 'pgqueue_worker'),
                                   ('pgqueue_worker', 'pgqueue_operator') LOOP
        CONTINUE WHEN pg_has_role(v_member, v_role, 'MEMBER');
        EXECUTE format('GRANT %I TO %I', v_role, v_member);
    END LOOP;
END
$$;
