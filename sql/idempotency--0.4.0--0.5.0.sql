-- idempotency 0.4.0 -> 0.5.0: hardening, round two.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.5.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.5.0'" to load this file. \quit
