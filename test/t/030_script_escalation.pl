# The extension's scripts run with the privileges of the role that runs
# CREATE or ALTER EXTENSION, usually a superuser.  A statement they run
# (a DO block, a top-level SELECT) must bind only to the extension's and
# pg_catalog's objects, else a role with CREATE on the extension's schema
# makes an object beforehand that the script then runs as the superuser.
#
# 1. ALTER EXTENSION idempotency UPDATE from 0.4.0 installs every old
#    guard again through idem_guard.  Its call passed the version column
#    as text where idem_guard takes name: an exact-match overload
#    public.idem_guard(regclass, name, text, text, bool), made by a role
#    with CREATE on public next to a table of its own carrying an old
#    check trigger, ran as the superuser who updated the extension.
# 2. The bodies in SQL and PL/pgSQL (both editions) name no type through
#    the caller's search_path.  The outbox functions declared 'x record':
#    with the database's search_path set to public, pg_catalog by its
#    owner, a type public.record whose field is a domain with a CHECK
#    calling the owner's function ran that function as the superuser who
#    called idem_outbox_purge (or the background purge that calls it).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('script_escalation');
$node->init;
$node->start;

my @versions = split /\n/, $node->safe_psql('postgres',
	"SELECT version FROM pg_available_extension_versions WHERE name = 'idempotency'");
plan skip_all => 'release 0.4.0 is not installable here'
  unless grep { $_ eq '0.4.0' } @versions;

# --- 1. the update from 0.4.0 ---------------------------------------------
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION idempotency VERSION '0.4.0';
	CREATE ROLE mallory LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory;
	SELECT idem_machine_define('m', '{"initial": ["new"], "transitions": {"new": ["done"]}}');
	CREATE TABLE public.pwned (what text);
	GRANT INSERT ON public.pwned TO PUBLIC;
});

# Mallory's table with a check trigger shaped as 0.4.0 made them (UPDATE
# OF the column), and the overload the old call resolved to.
$node->safe_psql(
	'postgres', q{
	SET ROLE mallory;
	CREATE TABLE public.orders (id int PRIMARY KEY, status text);
	CREATE TRIGGER idem_guard_check_status AFTER UPDATE OF status ON public.orders
	    FOR EACH ROW EXECUTE FUNCTION public.idem_guard_trigger('m', 'status', '', 'check');
	CREATE FUNCTION public.idem_guard(regclass, name, text, text, bool) RETURNS void
	    LANGUAGE plpgsql AS $$
	BEGIN
	    INSERT INTO public.pwned VALUES ('idem_guard overload as ' || current_user);
	    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
	        ALTER ROLE mallory SUPERUSER;
	    END IF;
	END $$;
});

my ($rc, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION idempotency UPDATE');
is($rc, 0, 'ALTER EXTENSION idempotency UPDATE from 0.4.0 succeeds')
  or diag $err;
is($node->safe_psql('postgres', 'SELECT count(*) FROM public.pwned'),
	'0', "the update ran nothing of mallory's");
is($node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
	'f', 'mallory is not a superuser');
# The old guard was installed again by the extension's idem_guard.
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_trigger
	 WHERE tgrelid = 'public.orders'::regclass AND tgqual IS NOT NULL
	   AND cardinality(tgattr::int2[]) = 0}),
	'2',
	"the old guard's triggers were made again by the extension's idem_guard");

# --- 2. types through the caller's search_path ------------------------------
$node->safe_psql(
	'postgres', q{
	CREATE DATABASE owned OWNER mallory;
	\c owned
	CREATE EXTENSION idempotency;
	CREATE TABLE public.pwned (what text);
	GRANT INSERT ON public.pwned TO PUBLIC;
	GRANT CREATE ON SCHEMA public TO mallory;
	SELECT idem_publish('t', '{"n": 1}', key => 'k1');
});
$node->safe_psql(
	'owned', q{
	SET ROLE mallory;
	ALTER DATABASE owned SET search_path = public, pg_catalog;
	CREATE FUNCTION public.pwn() RETURNS boolean LANGUAGE plpgsql
	    SET search_path = pg_catalog AS $$
	BEGIN
	    INSERT INTO public.pwned VALUES ('record as ' || current_user);
	    RETURN true;
	END $$;
	CREATE DOMAIN public.trap AS pg_catalog.text CHECK (public.pwn());
	CREATE TYPE public.record AS (topic public.trap, id public.trap, created_at public.trap);
});
# A new session takes the database's search_path.
($rc, $out, $err) = $node->psql('owned',
	"SELECT current_setting('search_path'); SELECT idem_outbox_purge();");
like($out, qr/^public, pg_catalog$/m, "the superuser's session has mallory's search_path");
is($node->safe_psql('owned', 'SELECT count(*) FROM public.pwned'),
	'0', "idem_outbox_purge ran nothing of mallory's")
  or diag $err;

$node->stop;
done_testing();
