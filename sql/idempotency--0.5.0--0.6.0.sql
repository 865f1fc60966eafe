-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit
