-- Isolation between applications in the outbox (docs/security.md,
-- Outbox): one role per application.  idem_grant gives claims only;
-- idem_outbox_grant lets a role publish to a topic, or read a topic as a
-- consumer group; row-level security on the outbox's tables holds every
-- role to its grants, whatever table privileges it has.
\set SHOW_CONTEXT never
\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates, idem_outbox_grants;

CREATE ROLE regress_iso_claims;      -- idem_grant only: claims
CREATE ROLE regress_iso_orders;      -- publishes to orders
CREATE ROLE regress_iso_mail;        -- publishes to mail
CREATE ROLE regress_iso_billing;     -- reads orders as group billing
CREATE ROLE regress_iso_audit;       -- reads every topic as group audit
CREATE ROLE regress_iso_billing_2 IN ROLE regress_iso_billing;  -- a member
SELECT idem_grant(r::regrole) FROM unnest(ARRAY['regress_iso_claims', 'regress_iso_orders', 'regress_iso_mail',
                                               'regress_iso_billing', 'regress_iso_audit']) AS r;
SELECT idem_outbox_grant('regress_iso_orders', 'publish', 'orders'),
       idem_outbox_grant('regress_iso_mail', 'publish', 'mail'),
       idem_outbox_grant('regress_iso_billing', 'consume', 'orders', 'billing'),
       idem_outbox_grant('regress_iso_audit', 'consume', NULL, 'audit');
SELECT role, privilege, topic, consumer FROM idem_outbox_grants ORDER BY role::text, privilege, topic, consumer;
SELECT pg_temp.try($$SELECT idem_outbox_grant('regress_iso_claims', 'own')$$);
SELECT pg_temp.try($$SELECT idem_outbox_grant('regress_iso_claims', 'publish', 't', 'g')$$);
SELECT pg_temp.try($$SELECT idem_outbox_grant(NULL, 'publish')$$);

-- Publishers: each to its own topic.
SET ROLE regress_iso_orders;
SELECT idem_publish('orders', '{"n": 1}', key => 'o1', aggregate => 'A') IS NOT NULL AS orders_published;
SELECT idem_publish('orders', '{"n": 2}', key => 'o2', aggregate => 'A') IS NOT NULL AS orders_published;
SELECT pg_temp.try($$SELECT idem_publish('mail', '{}', key => 'm-forged')$$);
RESET ROLE;
SET ROLE regress_iso_mail;
SELECT idem_publish('mail', '{"to": "x"}', key => 'm1') IS NOT NULL AS mail_published;
-- mail cannot read orders' messages, nor take the id of orders' next
-- message (which would make that idem_publish return NULL)
SELECT count(*) AS orders_seen FROM idem_outbox WHERE topic = 'orders';
SELECT pg_temp.try(format($$INSERT INTO idem_outbox (id, topic, key, seq, xact_id, created_at)
                          VALUES (%L, 'mail', 'forged', 0, pg_current_xact_id(), now())$$,
                          idem_outbox_id('orders', 'o3')));
SELECT pg_temp.try(format($$INSERT INTO idem_outbox (id, topic, key, seq, xact_id, created_at)
                          VALUES (%L, 'orders', 'o3', 0, pg_current_xact_id(), now())$$,
                          idem_outbox_id('orders', 'o3')));
-- nor delete or lock anything
SELECT pg_temp.try($$DELETE FROM idem_outbox$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_aggregates WHERE topic = 'orders'$$) AS orders_aggregates_seen;
RESET ROLE;
SET ROLE regress_iso_orders;
SELECT idem_publish('orders', '{"n": 3}', key => 'o3', aggregate => 'A') IS NOT NULL AS orders_next_published;
RESET ROLE;

-- A role with claims only: no outbox at all.
SET ROLE regress_iso_claims;
BEGIN;
SELECT idem_claim('iso', 'c1') AS claimed;
SELECT pg_temp.try($$SELECT idem_publish('orders', '{}')$$);
ROLLBACK;
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('billing', 'orders')$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing')$$);
SELECT pg_temp.try($$SELECT idem_outbox_ack('billing', idem_outbox_id('orders', 'o1'))$$);
SELECT pg_temp.try($$SELECT idem_outbox_unsubscribe('billing', 'orders')$$);
BEGIN;
SELECT idem_inbox('claims-app', idem_outbox_id('orders', 'o1')) AS inbox_is_a_claim;
ROLLBACK;
RESET ROLE;

-- Consumers: billing reads orders as billing, and nothing else.
SET ROLE regress_iso_billing;
SELECT idem_outbox_subscribe('billing', 'orders', from_start => true) AS subscribed;
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('billing', 'mail', from_start => true)$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('audit', 'orders', from_start => true)$$);
SELECT count(*) AS mail_seen FROM idem_outbox WHERE topic = 'mail';
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('billing', 1, '1 hour');
RESET ROLE;
-- audit reads every topic as audit
SET ROLE regress_iso_audit;
SELECT idem_outbox_subscribe('audit', 'orders', from_start => true) AS orders,
       idem_outbox_subscribe('audit', 'mail', from_start => true) AS mail;
SELECT topic, payload FROM idem_outbox_fetch('audit', 10, '1 hour') ORDER BY topic, payload::text;
-- audit cannot act for billing: not lease, ack, unsubscribe or see it
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing', 10, '1 day')$$);
SELECT pg_temp.try($$SELECT idem_outbox_ack('billing', idem_outbox_id('orders', 'o1'))$$);
SELECT idem_outbox_unsubscribe('billing', 'orders') AS unsubscribed_billing;
SELECT consumer, topic FROM idem_outbox_backlog ORDER BY 1, 2;
SELECT pg_temp.try($$UPDATE idem_outbox_runs SET available_at = now() + '100 years'$$);
SELECT count(*) AS billing_runs_seen FROM idem_outbox_runs WHERE consumer = 'billing';
RESET ROLE;
-- billing's state is untouched; a member of billing's role acts as billing
SET ROLE regress_iso_billing_2;
SELECT consumer, topic, unacknowledged, leased FROM idem_outbox_backlog;
SELECT idem_outbox_ack('billing', idem_outbox_id('orders', 'o1')) AS acked;
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('billing', 10, '1 hour');
RESET ROLE;
-- only the owner purges
SET ROLE regress_iso_billing;
SELECT pg_temp.try($$DELETE FROM idem_outbox WHERE topic = 'orders'$$);
RESET ROLE;

-- Revoking: the rows go, and with the last one the table privileges.
SELECT idem_outbox_revoke('regress_iso_audit', 'consume', 'orders') AS none_matched,
       idem_outbox_revoke('regress_iso_audit') AS revoked;
SET ROLE regress_iso_audit;
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox$$);
RESET ROLE;

TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates, idem_outbox_grants;
SELECT idem_revoke(r::regrole) FROM unnest(ARRAY['regress_iso_claims', 'regress_iso_orders', 'regress_iso_mail',
                                                'regress_iso_billing', 'regress_iso_audit']) AS r;
REVOKE USAGE ON SCHEMA public FROM regress_iso_claims, regress_iso_orders, regress_iso_mail,
                                   regress_iso_billing, regress_iso_audit;
DROP ROLE regress_iso_billing_2, regress_iso_claims, regress_iso_orders, regress_iso_mail,
          regress_iso_billing, regress_iso_audit;
DELETE FROM idem_records WHERE scope LIKE 'inbox:%';
