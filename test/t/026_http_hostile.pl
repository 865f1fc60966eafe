# The HTTP layer (sql/idempotency_http.sql) against a hostile database
# owner and against roles without grants (docs/security.md#http):
#
# 1. A database owner who is not a superuser plants, in public (where the
#    extension is installed, and where PUBLIC may create), text overloads
#    of every function the HTTP layer calls, a set_config of the same
#    signature as pg_catalog's, an operator ~ on text, a type
#    public.record, and puts public before pg_catalog in the database's
#    search_path.  Each trap counts itself in a sequence (which a rollback
#    does not undo), records its name and caller, tries to make the owner
#    a superuser, and answers something plausible (proceed, for
#    idem_http_begin), so that the caller's transaction commits.  A superuser then drives every HTTP entry point
#    (the PostgREST hooks with the request.* settings as PostgREST sets
#    them, idem_http_begin, finish and a replay, the helpers): no trap may
#    run, and the owner stays what it was.  0.5.0's pre-request passed an
#    untyped NULL body to idem_http_begin and an untyped headers literal
#    to idem_http_problem, so the owner's text overloads ran as the
#    superuser.
# 2. Advisory locks are public: a role without any grant holding the
#    advisory lock 0.5.0 took for a key made idem_http_begin answer 409 for
#    it forever.  The key must be claimable whatever advisory locks are
#    held, and a role without grants cannot put a key in flight.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('http_hostile');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
CREATE ROLE mallory LOGIN;
CREATE ROLE app LOGIN;
CREATE ROLE nobody LOGIN;
CREATE DATABASE shop OWNER mallory;
});
$node->safe_psql('shop', q{
CREATE EXTENSION idempotency;
SELECT idem_grant('app');
});

# --- 1. The owner's traps ---------------------------------------------------
my $traps = q{
GRANT CREATE ON SCHEMA public TO PUBLIC;
CREATE TABLE public.pwned (fn text, who text);
GRANT INSERT, SELECT ON public.pwned TO PUBLIC;
CREATE SEQUENCE public.trap_runs;
GRANT USAGE ON SEQUENCE public.trap_runs TO PUBLIC;
CREATE FUNCTION public.trap(fn text) RETURNS void
LANGUAGE plpgsql AS $t$
BEGIN
    PERFORM pg_catalog.nextval('public.trap_runs');
    RAISE WARNING 'trap ran: % as %', fn, current_user;
    INSERT INTO public.pwned VALUES (fn, current_user);
    BEGIN
        EXECUTE 'ALTER ROLE mallory SUPERUSER';
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
END
$t$;
CREATE TYPE public.record AS (x int);
};
# Text overloads of what the HTTP layer calls, each a trap.
my @overloads = (
	'idem_http_begin(text, text, text, text, text, boolean, interval, text, text) RETURNS idem_http_response',
	'idem_http_begin(text, text, text, text, text, boolean, interval, text, text, text) RETURNS idem_http_response',
	'idem_http_begin(text, text, text, bytea, text, boolean, interval, text, text, integer) RETURNS idem_http_response',
	'idem_http_problem(integer, text, text, text, text, text) RETURNS idem_http_response',
	'idem_http_parse_key(varchar) RETURNS text',
	'idem_http_result(integer, text, text, text[]) RETURNS jsonb',
	'idem_http_check(integer, text, text, text) RETURNS jsonb',
	'idem_http_fingerprint(text, text, text, text, integer) RETURNS text',
	'idem_http_finish(text, integer, text, text, text, text[]) RETURNS void',
	'idem_http_postgrest_raise(text) RETURNS void',
	'idem_claim(text, text, text, text) RETURNS boolean',
	'idem_lookup(text, varchar) RETURNS idem_record',
	'idem_complete(text, text, text) RETURNS void',
	'set_config(text, text, boolean) RETURNS text',
	'jsonb_build_object(text, text) RETURNS jsonb',
	'convert_to(text, text) RETURNS bytea',
	'sha256(text) RETURNS bytea');
for my $sig (@overloads)
{
	my ($name) = $sig =~ /^(\w+)/;
	my %plausible = (
		void => 'RETURN;',
		idem_http_response => q{RETURN ROW('proceed', NULL, NULL, NULL, NULL)::public.idem_http_response;},
		jsonb => q{RETURN '{}'::pg_catalog.jsonb;},
		text => q{RETURN 'k';},
		boolean => 'RETURN true;',
		bytea => q{RETURN '\x'::pg_catalog.bytea;},
		idem_record => 'RETURN NULL;');
	my ($rettype) = $sig =~ /RETURNS (\w+)$/;
	my $ret = $plausible{$rettype} // die "no plausible answer for $rettype";
	$traps .= "CREATE FUNCTION public.$sig LANGUAGE plpgsql AS \$t\$ BEGIN PERFORM public.trap('$name'); $ret END \$t\$;\n";
}
$traps .= q{
CREATE FUNCTION public.trap_match(text, text) RETURNS boolean
LANGUAGE plpgsql AS $t$ BEGIN PERFORM public.trap('~'); RETURN true; END $t$;
CREATE OPERATOR public.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = public.trap_match);
ALTER DATABASE shop SET search_path = public, pg_catalog;
};
$node->safe_psql('shop', $traps, extra_params => [ '-U', 'mallory' ]);
is($node->safe_psql('shop', 'SELECT count(*) FROM pg_proc WHERE proname = \'trap\''),
	'1', 'the owner planted the traps');

# What PostgREST sets before its pre-request (set_config(..., true) in the
# request's transaction), qualified: the caller's own SQL is not on trial.
sub request
{
	my ($method, $path, $key) = @_;
	my $headers = defined $key ? qq({"idempotency-key": "$key"}) : '{}';
	return "SELECT pg_catalog.set_config('request.method', '$method', true), "
	  . "pg_catalog.set_config('request.path', '$path', true), "
	  . "pg_catalog.set_config('request.headers', '$headers', true);";
}

# A request in flight, held by the application in another session.
my $holder = $node->background_psql('shop', on_error_stop => 1);
$holder->query_safe(q{BEGIN});
$holder->query_safe(q{SELECT (public.idem_http_begin('busy-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/orders'::pg_catalog.text)).action});

my @calls = (
	# PostgREST, table endpoints: the pre-request claims (proceed, 409 in flight).
	'BEGIN; ' . request('POST', '/orders', 'tbl-1') . ' SELECT public.idem_http_postgrest_pre_request(); COMMIT;',
	'BEGIN; ' . request('POST', '/orders', 'busy-1') . ' SELECT public.idem_http_postgrest_pre_request(); COMMIT;',
	'BEGIN; ' . request('POST', '/orders', 'tbl-1') . ' SELECT public.idem_http_postgrest_pre_request(); COMMIT;',
	# PostgREST, RPCs: missing, invalid, in flight, new, replayed.
	'BEGIN; ' . request('POST', '/rpc/f', undef) . ' SELECT public.idem_http_postgrest_pre_request(); COMMIT;',
	'BEGIN; ' . request('POST', '/rpc/f', 'a b') . ' SELECT public.idem_http_postgrest_pre_request(); COMMIT;',
	'BEGIN; ' . request('POST', '/rpc/f', 'busy-1') . ' SELECT public.idem_http_postgrest_pre_request();'
	  . q{ SELECT public.idem_http_postgrest_rpc('{"a": 1}'::pg_catalog.jsonb); COMMIT;},
	map({ 'BEGIN; ' . request('POST', '/rpc/f', 'rpc-1') . ' SELECT public.idem_http_postgrest_pre_request();'
	  . q{ SELECT (public.idem_http_postgrest_rpc('{"a": 1}'::pg_catalog.jsonb)).action;}
	  . q{ SELECT public.idem_http_postgrest_finish(201::pg_catalog.int4, '{"Location": "/f/1"}'::pg_catalog.jsonb, '\x7b7d'::pg_catalog.bytea); COMMIT;} } 1 .. 2),
	# The SQL functions: begin, finish, replay, mismatch, in flight, errors.
	q{BEGIN; SELECT public.idem_http_begin('k-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text, '\x7b7d'::pg_catalog.bytea, 'http'::pg_catalog.text, true, NULL::pg_catalog.interval, 'application/json'::pg_catalog.text);
	  SELECT public.idem_http_finish('k-1'::pg_catalog.text, 201::pg_catalog.int4, '{"Content-Type": "text/plain"}'::pg_catalog.jsonb, '\x6f6b'::pg_catalog.bytea); COMMIT;},
	q{SELECT public.idem_http_begin('k-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text, '\x7b7d'::pg_catalog.bytea, 'http'::pg_catalog.text, true, NULL::pg_catalog.interval, 'application/json'::pg_catalog.text)},
	q{SELECT public.idem_http_begin('k-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/other'::pg_catalog.text)},
	q{SELECT public.idem_http_begin('busy-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/orders'::pg_catalog.text)},
	q{SELECT public.idem_http_begin(NULL::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text)},
	q{SELECT public.idem_http_begin('k1,k2'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text)},
	q{SELECT public.idem_http_finish('k1,k2'::pg_catalog.text, 200::pg_catalog.int4)},
	q{SELECT public.idem_http_result(101::pg_catalog.int4)},
	q{SELECT public.idem_http_result(200::pg_catalog.int4, '{"Location": "/a"}'::pg_catalog.jsonb, '\x00'::pg_catalog.bytea)},
	q{SELECT public.idem_http_problem(500::pg_catalog.int4, 'x'::pg_catalog.text)},
	q{SELECT public.idem_http_parse_key('"k"'::pg_catalog.text)},
	q{SELECT public.idem_http_fingerprint('POST'::pg_catalog.text, '/o'::pg_catalog.text)},
	q{SELECT public.idem_http_check(200::pg_catalog.int4, '{}'::pg_catalog.jsonb, NULL::pg_catalog.text, NULL::pg_catalog.text[])});
my $answers = '';
for my $sql (@calls)
{
	my ($rc, $out, $err) = $node->psql('shop', $sql);
	$answers .= "$out $err\n";
}
like($answers, qr/idempotency-key-in-flight/, 'the calls saw a request in flight');
like($answers, qr/\(replay,201,/, 'and replayed a stored response');
like($answers, qr/idempotency-key-invalid/, 'and refused an invalid key');
unlike($answers, qr/trap ran/, 'no trap of the owner ran (no warning)');
is($node->safe_psql('shop', 'SELECT last_value::text || \' \' || is_called::text FROM public.trap_runs'),
	'1 false', 'no trap of the owner ran (its sequence is untouched)');
is($node->safe_psql('shop', 'SELECT pg_catalog.string_agg(fn || \' as \' || who, \', \') FROM public.pwned'),
	'', 'no trap of the owner ran (nothing recorded)');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}),
	'f', 'the owner is not a superuser');
$holder->query_safe('ROLLBACK');
$holder->quit;

# --- 2. Advisory locks -------------------------------------------------------
# (Advisory locks belong to a database: the squatter connects to shop.)
my $squatter = $node->background_psql('shop', on_error_stop => 1,
	extra_params => [ '-U', 'nobody' ]);
$squatter->query_safe(q{SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('http' || E'\n' || 'squat-1', 7655))});
is( $node->safe_psql('shop',
		q{SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted}),
	'1', 'the squatter holds the advisory lock 0.5.0 took for the key');
is( $node->safe_psql(
		'shop',
		q{BEGIN; SELECT (public.idem_http_begin('squat-1'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text)).action; COMMIT;},
		extra_params => [ '-U', 'app' ]),
	'proceed',
	'a key whose old advisory lock a role without grants holds is claimed');
$squatter->quit;
my ($rc, $out, $err) = $node->psql(
	'shop',
	q{BEGIN; SELECT public.idem_http_begin('squat-2'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text);},
	extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied/, 'a role without grants cannot claim a key');
is( $node->safe_psql(
		'shop',
		q{BEGIN; SELECT (public.idem_http_begin('squat-2'::pg_catalog.text, 'POST'::pg_catalog.text, '/o'::pg_catalog.text)).action; COMMIT;},
		extra_params => [ '-U', 'app' ]),
	'proceed',
	'nor hold one in flight');

$node->stop;
done_testing();
