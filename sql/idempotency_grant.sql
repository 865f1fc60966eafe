--------------------------------------------------------------------------
-- Granting an application role access
--------------------------------------------------------------------------

-- What an application role needs, in one call, so that nobody has to
-- collect GRANTs from the documentation.  Run by the extension's owner (a
-- superuser, or the role that created the extension): the GRANTs are
-- made with the caller's privileges.  Not public.
CREATE FUNCTION @extschema@.idem_grant(
    role pg_catalog.regrole,
    access pg_catalog.text DEFAULT 'write')
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF access IS DISTINCT FROM 'write' AND access IS DISTINCT FROM 'read'
       AND access IS DISTINCT FROM 'define' THEN
        RAISE EXCEPTION 'idem_grant: unknown access level "%"', access
            USING ERRCODE = '22023',
                  DETAIL = 'The access level is ''write'' (claims, leases, tokens, guarded tables), ''read'' (idem_lookup, idem_await) or ''define'' (''write'', and defining machines and guarding the role''s own tables).',
                  HINT = 'Call idem_grant(role), idem_grant(role, ''read'') or idem_grant(role, ''define'').';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, role);
    IF access OPERATOR(pg_catalog.=) 'read' THEN
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_records TO %s', nsp, role);
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_records TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_token_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT INSERT ON TABLE %I.idem_transition_log TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_transition_log_id_seq TO %s', nsp, role);
    -- The outbox is not part of 'write': publishing and consuming are
    -- granted per topic and consumer group with idem_outbox_grant.
    -- 'define': machines (idem_machines, whose triggers validate each
    -- write) and guards on tables the role owns (CREATE TRIGGER needs
    -- its TRIGGER privilege there).
    IF access OPERATOR(pg_catalog.=) 'define' THEN
        EXECUTE pg_catalog.format('GRANT INSERT, UPDATE, DELETE ON TABLE %I.idem_machines TO %s', nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) TO %s', nsp, nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) TO %s', nsp, nsp, role);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) IS
    'Grant role what an application needs: ''write'' (default) for claims, leases, tokens and guarded tables with history, ''read'' for idem_lookup and idem_await, ''define'' for ''write'' and defining machines and guards';

CREATE FUNCTION @extschema@.idem_revoke(role pg_catalog.regrole)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_records FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_token_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_transition_log FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_transition_log_id_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_subscriptions FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_runs FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_aggregates FROM %s', nsp, role);
    EXECUTE pg_catalog.format('DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1', nsp) USING role;
    -- 'define' (SELECT on idem_machines stays PUBLIC's).
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_machines FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) FROM %s', nsp, nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) FROM %s', nsp, nsp, role);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant and idem_outbox_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;
