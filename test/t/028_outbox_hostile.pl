# The background worker's outbox purge against a hostile database owner
# (docs/security.md, Outbox).  The owner of database app (not a superuser)
# sets the database's search_path to public, pg_catalog and plants, in
# public (the extension's schema): a type named record whose field is a
# domain with a CHECK calling the owner's function, operators on the types
# the purge compares, and overloads with one more defaulted argument of
# idem_outbox_purge and idem_outbox_advance.  The worker (a superuser)
# runs its rounds: every round purges the outbox (no "is not unique", no
# failed round), and none of the owner's functions ever ran, let alone
# as a superuser; the owner is still not a superuser.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('outbox_hostile');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'idempotency'
idempotency.purge_databases = 'app'
idempotency.purge_naptime = 1s
idempotency.purge_delay = 0
});
$node->start;

$node->safe_psql('postgres', q{
CREATE ROLE app_owner LOGIN;
CREATE DATABASE app OWNER app_owner;
});
$node->safe_psql('app', q{
CREATE EXTENSION idempotency;
SELECT idem_outbox_topic('t', retention => '0');
SELECT idem_outbox_subscribe('g', 't', from_start => true);
SELECT count(idem_publish('t', '{}', key => 'k' || i, aggregate => 'a' || (i % 3)))
  FROM generate_series(1, 30) AS i;
SELECT count(idem_outbox_ack('g', f.id)) FROM idem_outbox_fetch('g', 100) AS f;
});

# The owner's traps, created as the owner.
$node->safe_psql('app', q{
SET ROLE app_owner;
ALTER DATABASE app SET search_path = public, pg_catalog;
CREATE TABLE public.ob_ran (fn text, who name, super boolean);
GRANT INSERT, SELECT ON public.ob_ran TO PUBLIC;
CREATE FUNCTION public.ob_evil(fn text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ob_ran
    SELECT fn, current_user, r.rolsuper FROM pg_catalog.pg_roles r
     WHERE r.rolname OPERATOR(pg_catalog.=) current_user;
    RETURN true;
END $$;
CREATE DOMAIN public.ob_text AS text CHECK (public.ob_evil('domain'));
CREATE TYPE public.record AS (topic public.ob_text);
CREATE FUNCTION public.ob_xid8_lt(xid8, xid8) RETURNS boolean LANGUAGE sql
    AS $$ SELECT public.ob_evil('xid8 <') $$;
CREATE FUNCTION public.ob_ts_minus(timestamptz, interval) RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT CASE WHEN public.ob_evil('timestamptz -') THEN $1 END $$;
CREATE OPERATOR public.< (LEFTARG = xid8, RIGHTARG = xid8, FUNCTION = public.ob_xid8_lt);
CREATE OPERATOR public.- (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.ob_ts_minus);
CREATE FUNCTION public.idem_outbox_purge(batch_size int4 DEFAULT 10000, extra int DEFAULT 0) RETURNS int8
    LANGUAGE sql AS $$ SELECT CASE WHEN public.ob_evil('idem_outbox_purge') THEN 0::int8 END $$;
CREATE FUNCTION public.idem_outbox_advance(consumer text, extra int DEFAULT 0) RETURNS void
    LANGUAGE sql AS $$ SELECT public.ob_evil('idem_outbox_advance') $$;
});

# The worker's rounds purge the 30 acknowledged messages.
ok( $node->poll_query_until('app',
		'SELECT count(*) = 0 FROM idem_outbox'),
	'the worker purged the outbox despite the overloads and the search_path');
# Two more rounds after that (one round a second).
sleep 3;
my $log = slurp_file($node->logfile);
like($log, qr/removed 30 outbox messages in database "app"/,
	'the purge was logged');
unlike($log, qr/is not unique|type record is not composite|purge worker.*exited with exit code 1/,
	'no round failed');
is($node->safe_psql('app', 'SELECT count(*) FROM public.ob_ran'),
	'0', 'none of the owner\'s functions ran');
is($node->safe_psql('postgres',
		"SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'"),
	'f', 'the owner is not a superuser');

$node->stop;
done_testing();
