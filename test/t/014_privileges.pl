# Privileges and injection, for every function of the extension
# (test/sql/claim_security.sql covers the claim functions in detail):
#   1. a role without grants can neither read nor change records,
#      machines, guards, history or statistics through any function (the
#      list of functions is read from the catalog; one not classified here
#      fails the test), nor forge history with a hand-made guard trigger;
#   2. partial grants give exactly the documented powers: SELECT only
#      reads; idem_begin needs USAGE on idem_token_seq; release and purge
#      need DELETE; machine definitions and guards need EXECUTE and the
#      table privileges; history needs INSERT on idem_transition_log;
#      idem_grant's levels: 'write' gives leases, bound leases and
#      idem_effect_started but neither the outbox, idem_maintain nor
#      machines, 'define' adds machines, idem_revoke takes them back;
#   3. row-level security isolates tenants for leases, batches and tokens
#      too: another tenant's records are invisible, untouchable and never
#      claimed twice;
#   4. search_path hijacking (decoy tables, types and sequences, and
#      pg_catalog-shadowing functions, operators and aggregates in a schema
#      ahead of pg_catalog, plus temporary decoy tables) changes nothing,
#      for a superuser and for an ordinary role;
#   5. identifiers given to idem_guard are quoted: a schema, table and
#      columns named with quotes, spaces and semicolons work and inject
#      nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('privileges');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf('postgresql.conf', "log_statement = none\n");
$node->start;

# ('OK', stdout) or ('ERR', sqlstate) of $sql run as $role (a login role;
# the first error stops the script).
sub as
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=sqlstate' ]);
	return ('ERR', $1) if $err =~ /ERROR:\s+([0-9A-Z]{5})/;
	die "psql as $role failed ($ret): $err" if $ret != 0;
	return ('OK', $out);
}

sub as_gives
{
	my ($role, $sql, $want, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($k, $v) = as($role, $sql);
	return is("$k: $v", "OK: $want", $name);
}

sub as_fails
{
	my ($role, $sql, $code, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($k, $v) = as($role, $sql);
	return is("$k: $v", "ERR: $code", $name);
}

sub su { return $node->safe_psql('postgres', $_[0]); }

su(q{
CREATE EXTENSION idempotency;
CREATE ROLE nobody LOGIN;
CREATE ROLE reader LOGIN;
CREATE ROLE writer LOGIN;
CREATE ROLE leaser LOGIN;
CREATE ROLE definer LOGIN;
CREATE ROLE gowner LOGIN;
CREATE ROLE ta LOGIN;
CREATE ROLE tb LOGIN;
CREATE ROLE app LOGIN;
-- A fingerprint of everything the extension keeps, for before/after.
CREATE FUNCTION state_hash() RETURNS text LANGUAGE sql AS $$
    SELECT concat_ws('/',
        (SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) FROM idem_records r),
        (SELECT md5(coalesce(string_agg(m::text, '|' ORDER BY m::text), '')) FROM idem_machines m),
        (SELECT md5(coalesce(string_agg(l::text, '|' ORDER BY l.id), '')) FROM idem_transition_log l),
        (SELECT md5(coalesce(string_agg(t.tgname || t.tgrelid::regclass::text, '|'
                                        ORDER BY t.tgname, t.tgrelid), ''))
         FROM pg_trigger t WHERE NOT t.tgisinternal))
$$;
REVOKE ALL ON FUNCTION state_hash() FROM PUBLIC;
-- Existing state that others will try to read or change.
SELECT idem_claim('sec', 'done');
SELECT idem_complete('sec', 'done', '{"secret": 42}');
SELECT idem_machine_define('secm', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": []}}');
CREATE TABLE orders_sec (id int PRIMARY KEY, status text);
SELECT idem_guard('orders_sec', 'status', 'secm', history => true);
INSERT INTO orders_sec VALUES (1, 'new');
});
my $lease_token = su(q{SELECT token FROM idem_begin('sec', 'lease', lease => '1 hour')});
my $one_time    = su(q{SELECT idem_token_issue('sec', '1 hour')});

#--------------------------------------------------------------------------
# 1. No grants at all.
#--------------------------------------------------------------------------
my $T  = $lease_token;
my $TK = $one_time;
# function => the calls that exercise it, and what a role without grants
# gets: 42501, or (functions public by design) 'ok'.
my %calls = (
	'idem_outbox_id(text,text,text,integer)' => [ [ q{SELECT idem_outbox_id('t','k')}, 'ok:f550a9ff-6c38-8a44-843b-dd30c90707c3' ] ],
	'idem_xid8_near(xid,xid8)' => [ [ q{SELECT idem_xid8_near('1','1')}, 'ok:1' ] ],
	'idem_xact_claims()' => [ [ q{SELECT count(*) FROM idem_xact_claims()}, 'ok:0' ] ],
	'idem_publish(text,jsonb,text,text,jsonb,text,text,integer)' => [ [ q{SELECT idem_publish('t','{}',key=>'k')}, '42501' ] ],
	'idem_publish_sql(text,jsonb,text,text,jsonb,text,text,integer)' => [ [ q{SELECT idem_publish_sql('t','{}',key=>'k')}, '42501' ] ],
	'idem_outbox_topic(text,text,interval,boolean)' => [ [ q{SELECT idem_outbox_topic('t')}, '42501' ] ],
	'idem_outbox_subscribe(text,text,boolean)' => [ [ q{SELECT idem_outbox_subscribe('c','t')}, '42501' ] ],
	'idem_outbox_unsubscribe(text,text)' => [ [ q{SELECT idem_outbox_unsubscribe('c','t')}, '42501' ] ],
	'idem_outbox_advance(text)' => [ [ q{SELECT idem_outbox_advance(NULL)}, '42501' ] ],
	'idem_outbox_fetch(text,integer,interval)' => [ [ q{SELECT * FROM idem_outbox_fetch('c')}, '42501' ] ],
	'idem_outbox_ack(text,uuid)' => [ [ q{SELECT idem_outbox_ack('c','00000000-0000-8000-8000-000000000000')}, '42501' ] ],
	'idem_inbox(text,uuid,interval,text)' => [ [ q{SELECT idem_inbox('c','00000000-0000-8000-8000-000000000001')}, '42501' ] ],
	'idem_outbox_purge(integer)' => [ [ q{SELECT idem_outbox_purge()}, '42501' ] ],
	'idem_outbox_ack_many(text,uuid[])' =>
	  [ [ q{SELECT idem_outbox_ack_many('c', ARRAY['00000000-0000-8000-8000-000000000000']::uuid[])}, '42501' ] ],
	# Not public: they grant.
	'idem_outbox_grant(regrole,text,text,text)' => [
		[ q{SELECT idem_outbox_grant('nobody', 'publish', 't')}, '42501' ],
		[ q{SELECT has_function_privilege('idem_outbox_grant(regrole,text,text,text)', 'EXECUTE')}, 'ok:f' ],
	],
	'idem_outbox_revoke(regrole,text,text,text)' => [
		[ q{SELECT idem_outbox_revoke('nobody', 'publish', 't')}, '42501' ],
		[ q{SELECT has_function_privilege('idem_outbox_revoke(regrole,text,text,text)', 'EXECUTE')}, 'ok:f' ],
	],
	# Not public: it purges (the extension's owner schedules it).  The
	# purges would refuse anyway; has_function_privilege pins the REVOKE.
	'idem_maintain(integer)' => [
		[ q{SELECT idem_maintain()}, '42501' ],
		[ q{SELECT has_function_privilege('idem_maintain(integer)', 'EXECUTE')}, 'ok:f' ],
	],
	# Public by design: they only say who purges and what waits; a count
	# the caller may not read is NULL.
	'idem_purge_worker()' => [ [ q{SELECT idem_purge_worker()}, 'ok:not preloaded' ] ],
	'idem_health()' => [
		[ q{SELECT string_agg(part || ':' || coalesce(waiting::text, 'null'), ',' ORDER BY part) FROM idem_health()}, 'ok:outbox:null,records:null' ],
		[ q{SELECT count(*) FROM idem_health}, 'ok:2' ],
	],
	'idem_http_parse_key(text)' => [ [ q{SELECT idem_http_parse_key('"k"')}, 'ok:k' ] ],
	'idem_http_problem(integer,text,text,text,text,jsonb)' => [ [ q{SELECT (idem_http_problem(409, 'x')).status}, 'ok:409' ] ],
	'idem_http_result(integer,jsonb,bytea,text[])' => [ [ q{SELECT idem_http_result(201) ->> 'status'}, 'ok:201' ] ],
	'idem_http_check(integer,jsonb,text,text[])' => [ [ q{SELECT idem_http_check(201, '{}', NULL, NULL) ->> 'status'}, 'ok:201' ] ],
	'idem_http_fingerprint(text,text,bytea,text,integer)' => [ [ q{SELECT idem_http_fingerprint('POST', '/p')},
		'ok:idem-http/2 bf0c55601373c6c6a21d7a40e3207c209d0cf5d982f5ab8e448afe81a8643602' ] ],
	'idem_http_begin(text,text,text,bytea,text,boolean,interval,text,text,integer,text)' =>
	  [ [ q{SELECT idem_http_begin('done', 'POST', '/p', scope => 'sec')}, '42501' ] ],
	'idem_http_finish(text,integer,jsonb,bytea,text,text[])' => [ [ q{SELECT idem_http_finish('done', 200, scope => 'sec')}, '42501' ] ],
	'idem_http_postgrest_raise(idem_http_response)' => [ [ q{SELECT idem_http_postgrest_raise(idem_http_problem(409, 'x'))}, 'PGRST' ] ],
	'idem_http_postgrest_pre_request(text,boolean,text[],interval,text)' => [ [ q{SELECT idem_http_postgrest_pre_request()}, 'ok:' ] ],
	'idem_http_postgrest_rpc(jsonb,text,boolean,interval,text)' => [ [
		q{SELECT idem_http_postgrest_rpc('{}', scope => 'sec') FROM (SELECT set_config('request.headers', '{"idempotency-key": "done"}', true)) AS s}, '42501' ] ],
	'idem_http_postgrest_finish(integer,jsonb,bytea,text[])' => [ [ q{SELECT idem_http_postgrest_finish(200)}, 'ok:' ] ],
	'idem_claim(text)' => [ [ q{SELECT idem_claim('new')}, '42501' ] ],
	'idem_claim(text,text,interval,text)' => [
		[ q{SELECT idem_claim('sec', 'new')},  '42501' ],
		[ q{SELECT idem_claim('sec', 'done')}, '42501' ],
	],
	'idem_complete(text,text,jsonb)' => [ [ q{SELECT idem_complete('sec', 'done', '1')}, '42501' ] ],
	'idem_lookup(text,text)'         => [ [ q{SELECT idem_lookup('sec', 'done')}, '42501' ] ],
	'idem_release(text,text)'        => [ [ q{SELECT idem_release('sec', 'done')}, '42501' ] ],
	'idem_purge(integer)'            => [ [ q{SELECT idem_purge()}, '42501' ] ],
	'idem_claim_many(text,text[],interval)' =>
	  [ [ q{SELECT * FROM idem_claim_many('sec', ARRAY['new', 'done'])}, '42501' ] ],
	'idem_begin(text,text,interval,interval,text,boolean)' => [
		[ q{SELECT * FROM idem_begin('sec', 'new')},  '42501' ],
		[ q{SELECT * FROM idem_begin('sec', 'done')}, '42501' ],
		[ q{SELECT * FROM idem_begin('sec', 'new', bind_to_session => true)}, '42501' ],
	],
	'idem_effect_started(text,text,bigint)' =>
	  [ [ qq{SELECT idem_effect_started('sec', 'lease', $T)}, '42501' ] ],
	'idem_heartbeat(text,text,bigint,interval)' =>
	  [ [ qq{SELECT idem_heartbeat('sec', 'lease', $T)}, '42501' ] ],
	'idem_finish(text,text,bigint,jsonb)' =>
	  [ [ qq{SELECT idem_finish('sec', 'lease', $T, '"stolen"')}, '42501' ] ],
	'idem_fail(text,text,bigint,jsonb,boolean)' =>
	  [ [ qq{SELECT idem_fail('sec', 'lease', $T, '"stolen"', false)}, '42501' ] ],
	'idem_await(text,text,interval)' => [ [ q{SELECT idem_await('sec', 'done', '0')}, '42501' ] ],
	'idem_token_issue(text,interval)' => [ [ q{SELECT idem_token_issue('sec')}, '42501' ] ],
	'idem_token_consume(text,text)' => [ [ qq{SELECT idem_token_consume('sec', '$TK')}, '42501' ] ],
	'idem_machine_define(text,jsonb)' => [
		[ q{SELECT idem_machine_define('secm', '{"initial": ["paid"], "transitions": {}}')}, '42501' ],
		[ q{SELECT idem_machine_define('other', '{"initial": ["a"], "transitions": {}}')},  '42501' ],
	],
	'idem_machine_drop(text)' => [ [ q{SELECT idem_machine_drop('secm')}, '42501' ] ],
	'idem_guard(regclass,name,text,name,boolean)' =>
	  [ [ q{SELECT idem_guard('orders_sec', 'status', 'secm')}, '42501' ] ],
	'idem_unguard(regclass,name)' => [ [ q{SELECT idem_unguard('orders_sec', 'status')}, '42501' ] ],
	'idem_stats()'       => [ [ q{SELECT * FROM idem_stats()}, '42501' ], [ q{SELECT * FROM idem_stats}, '42501' ] ],
	'idem_stats_reset()' => [ [ q{SELECT idem_stats_reset()}, '42501' ] ],
	'idem_summary()' =>
	  [ [ q{SELECT * FROM idem_summary()}, '42501' ], [ q{SELECT * FROM idem_summary}, '42501' ] ],
	# Public by design: they only read machine definitions.
	'idem_can_transition(text,text,text)' => [ [ q{SELECT idem_can_transition('secm', 'new', 'paid')}, 'ok:t' ] ],
	'idem_transition(text,text,text)'     => [ [ q{SELECT idem_transition('secm', 'new', 'paid')}, 'ok:paid' ] ],
	'idem_transition_strict(text,text,text)' => [ [ q{SELECT idem_transition_strict('secm', 'new', 'paid')}, 'ok:paid' ] ],
	'idem_guard_allows(text,text,text)'   => [ [ q{SELECT idem_guard_allows('secm', 'paid', 'new')}, 'ok:f' ] ],
	'idem_sources(text,text)'             => [ [ q{SELECT idem_sources('secm', 'paid')}, 'ok:{new}' ] ],
	# Public by design: a pure function of its argument (the CHECK on status).
	'idem_status_is_valid(text)' => [ [ q{SELECT idem_status_is_valid('claimed')}, 'ok:t' ] ],
	# Trigger functions cannot be called directly; idem_machines_trigger
	# is not even executable.
	'idem_guard_trigger()'    => [ [ q{SELECT idem_guard_trigger()},    '39P01' ] ],
	'idem_machines_trigger()' => [ [ q{SELECT idem_machines_trigger()}, '42501' ] ],
	# Not public: they grant.
	'idem_grant(regrole,text)' => [ [ q{SELECT idem_grant('nobody')}, '42501' ] ],
	'idem_revoke(regrole)'     => [ [ q{SELECT idem_revoke('nobody')}, '42501' ] ],
	# Not public: it changes the tables (here, without Citus, it would fail with 55000).
	'idem_distribute(regtype,regclass,boolean)' => [ [ q{SELECT idem_distribute()}, '42501' ] ],
	# Public like the functions they twin; on records without a shard key
	# they refuse with 55000 before any table is touched.
	'idem_claim_at("any",text,text,interval,text)' => [ [ q{SELECT idem_claim_at(1, 'sec', 'new')}, '55000' ] ],
	'idem_complete_at("any",text,text,jsonb)' => [ [ q{SELECT idem_complete_at(1, 'sec', 'done', '1')}, '55000' ] ],
	'idem_lookup_at("any",text,text)' => [ [ q{SELECT idem_lookup_at(1, 'sec', 'done')}, '55000' ] ],
	'idem_release_at("any",text,text)' => [ [ q{SELECT idem_release_at(1, 'sec', 'done')}, '55000' ] ],
	'idem_begin_at("any",text,text,interval,interval,text,boolean)' => [ [ q{SELECT * FROM idem_begin_at(1, 'sec', 'new')}, '55000' ] ],
	'idem_effect_started_at("any",text,text,bigint)' => [ [ q{SELECT idem_effect_started_at(1, 'sec', 'lease', 1)}, '55000' ] ],
	'idem_heartbeat_at("any",text,text,bigint,interval)' => [ [ q{SELECT idem_heartbeat_at(1, 'sec', 'lease', 1)}, '55000' ] ],
	'idem_finish_at("any",text,text,bigint,jsonb)' => [ [ q{SELECT idem_finish_at(1, 'sec', 'lease', 1)}, '55000' ] ],
	'idem_fail_at("any",text,text,bigint,jsonb,boolean)' => [ [ q{SELECT idem_fail_at(1, 'sec', 'lease', 1)}, '55000' ] ],
	'idem_await_at("any",text,text,interval)' => [ [ q{SELECT idem_await_at(1, 'sec', 'done', '0')}, '55000' ] ],
	'idem_token_issue_at("any",text,interval)' => [ [ q{SELECT idem_token_issue_at(1, 'sec')}, '55000' ] ],
	'idem_token_consume_at("any",text,text)' => [ [ q{SELECT idem_token_consume_at(1, 'sec', 'x')}, '55000' ] ],
	'idem_claim_many_at("any",text,text[],interval)' => [ [ q{SELECT * FROM idem_claim_many_at(1, 'sec', ARRAY['new'])}, '55000' ] ],
	# Not public, as idem_stats (here, without Citus, it would fail with 55000).
	'idem_cluster_stats()' => [ [ q{SELECT * FROM idem_cluster_stats()}, '42501' ] ],);

my @functions = split /\n/, su(q{
	SELECT p.oid::regprocedure::text
	FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	                AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idempotency'
	ORDER BY 1});
cmp_ok(scalar @functions, '>=', 20, 'the extension has its functions');

my $before = su('SELECT state_hash()');
for my $f (@functions)
{
	ok($calls{$f}, "$f is covered by the privilege test") or next;
	for my $c (@{ $calls{$f} })
	{
		my ($sql, $want) = @$c;
		if ($want =~ /^ok:(.*)$/)
		{
			as_gives('nobody', $sql, $1, "without grants: $sql works (public by design)");
		}
		else
		{
			as_fails('nobody', $sql, $want, "without grants: $sql fails with $want");
		}
	}
}
# The tables and the sequence themselves.
for my $c (
	[ q{SELECT * FROM idem_records}, '42501' ],
	[ q{INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at) VALUES ('sec', 'x', 'completed', now(), now(), 'infinity')}, '42501' ],
	[ q{UPDATE idem_records SET status = 'retryable'}, '42501' ],
	[ q{DELETE FROM idem_records}, '42501' ],
	[ q{SELECT nextval('idem_token_seq')}, '42501' ],
	[ q{SELECT setval('idem_token_seq', 1)}, '42501' ],
	[ q{INSERT INTO idem_machines (machine, definition) VALUES ('other', '{"initial": ["a"], "transitions": {}}')}, '42501' ],
	[ q{UPDATE idem_machines SET definition = '{"initial": ["paid"], "transitions": {}}'}, '42501' ],
	[ q{DELETE FROM idem_machines}, '42501' ],
	[ q{SELECT * FROM idem_transition_log}, '42501' ],
	[ q{INSERT INTO idem_transition_log (table_name, status_column, to_state, xact_id) VALUES ('x', 'y', 'z', '1')}, '42501' ],
	[ q{UPDATE orders_sec SET status = 'paid'}, '42501' ],
	[ q{ALTER TABLE orders_sec DISABLE TRIGGER ALL}, '42501' ],)
{
	as_fails('nobody', $c->[0], $c->[1], "without grants: $c->[0] fails with $c->[1]");
}
as_gives('nobody', q{SELECT count(*) FROM idem_machines WHERE machine = 'secm'}, '1',
	'machine definitions are readable by everybody');

# A hand-made trigger on one's own table cannot forge history: it is not
# shaped as idem_guard makes a log trigger, so it refuses to run (39P01);
# a real one's insert would run with the caller's privileges.
su(q{CREATE SCHEMA nobody_s AUTHORIZATION nobody});
as_gives('nobody', q{
	CREATE TABLE nobody_s.t (id int PRIMARY KEY, status text);
	CREATE TRIGGER forged AFTER INSERT ON nobody_s.t FOR EACH ROW
	EXECUTE FUNCTION public.idem_guard_trigger('secm', 'status', '', 'log');
	SELECT 'created'}, 'created', 'a role may put the trigger function on its own table');
as_fails('nobody', q{INSERT INTO nobody_s.t VALUES (1, 'paid')}, '39P01',
	'but it is not a guard: the history it would write is refused');
su(q{DROP SCHEMA nobody_s CASCADE});
is(su('SELECT state_hash()'), $before, 'nothing the extension keeps was changed or added');

#--------------------------------------------------------------------------
# 2. Partial grants.
#--------------------------------------------------------------------------
su(q{GRANT SELECT ON idem_records TO reader});
as_gives('reader', q{SELECT (idem_lookup('sec', 'done')).result}, '{"secret": 42}', 'SELECT: lookup works');
as_gives('reader', q{SELECT (idem_await('sec', 'done', '0')).status}, 'completed', 'SELECT: await works');
as_gives('reader', q{SELECT scope || ':' || records FROM idem_summary() WHERE scope = 'sec'}, 'sec:3',
	'SELECT: the summary works');
for my $sql (
	q{SELECT idem_claim('sec', 'new')}, q{SELECT idem_claim('sec', 'done')},
	q{SELECT idem_complete('sec', 'done', '1')}, q{SELECT idem_release('sec', 'done')},
	q{SELECT idem_purge()}, q{SELECT * FROM idem_begin('sec', 'new')},
	qq{SELECT idem_finish('sec', 'lease', $T)}, q{SELECT * FROM idem_claim_many('sec', ARRAY['new'])},
	q{SELECT idem_token_issue('sec')}, qq{SELECT idem_token_consume('sec', '$TK')})
{
	as_fails('reader', $sql, '42501', "SELECT only: $sql fails with 42501");
}

su(q{GRANT SELECT, INSERT, UPDATE ON idem_records TO writer});
as_gives('writer', q{SELECT idem_claim('w', 'k1'), idem_claim('w', 'k1')}, 't|f', 'writer: claims work');
as_gives('writer', q{SELECT idem_token_consume('sec', '} . $TK . q{')}, 't', 'writer: tokens work');
as_fails('writer', q{SELECT * FROM idem_begin('w', 'lease')}, '42501',
	'idem_begin needs USAGE on idem_token_seq');
as_fails('writer', q{SELECT * FROM idem_begin('sec', 'done')}, '42501',
	'... also for a key that is already done');
as_gives('writer', q{SELECT count(*) FROM idem_records WHERE key = 'lease' AND scope = 'w'}, '0',
	'... and nothing was written');
as_fails('writer', q{SELECT idem_release('w', 'k1')}, '42501', 'idem_release needs DELETE');
as_fails('writer', q{SELECT idem_purge()}, '42501', 'idem_purge needs DELETE');
su(q{GRANT USAGE ON SEQUENCE idem_token_seq TO writer; GRANT DELETE ON idem_records TO writer});
as_gives('writer', q{SELECT outcome FROM idem_begin('w', 'lease')}, 'acquired', 'with USAGE, idem_begin works');
as_gives('writer', q{SELECT idem_release('w', 'k1')}, 't', 'with DELETE, idem_release works');

su(q{GRANT EXECUTE ON FUNCTION idem_machine_define(text, jsonb), idem_machine_drop(text) TO definer});
as_fails('definer', q{SELECT idem_machine_define('dm', '{"initial": ["a"], "transitions": {}}')}, '42501',
	'EXECUTE alone does not allow defining machines');
su(q{GRANT INSERT, UPDATE ON idem_machines TO definer});
as_gives('definer', q{SELECT idem_machine_define('dm', '{"initial": ["a"], "transitions": {}}')}, '',
	'with INSERT and UPDATE on idem_machines it does');
as_fails('definer', q{SELECT idem_machine_drop('dm')}, '42501', 'dropping needs DELETE');

su(q{
	CREATE SCHEMA gs AUTHORIZATION gowner;
	GRANT EXECUTE ON FUNCTION idem_guard(regclass, name, text, name, boolean),
	                          idem_unguard(regclass, name) TO gowner;
});
as_fails('gowner', q{SELECT idem_guard('orders_sec', 'status', 'secm')}, '42501',
	'idem_guard on a table without the TRIGGER privilege fails');
as_fails('gowner', q{SELECT idem_unguard('orders_sec', 'status')}, '42501',
	'idem_unguard on a table of another owner fails');
as_gives('gowner', q{
	CREATE TABLE gs.mine (id int PRIMARY KEY, status text);
	SELECT idem_guard('gs.mine', 'status', 'secm', history => true);
	SELECT 'guarded'}, "\nguarded", 'the owner of a table may guard it');
as_fails('gowner', q{INSERT INTO gs.mine VALUES (1, 'new')}, '42501',
	'writing a guarded table with history needs INSERT on idem_transition_log');
su(q{GRANT INSERT ON idem_transition_log TO gowner;
     GRANT USAGE ON SEQUENCE idem_transition_log_id_seq TO gowner});
as_gives('gowner', q{INSERT INTO gs.mine VALUES (1, 'new'); SELECT 'ok'}, 'ok', '... and then it works');
as_fails('gowner', q{UPDATE gs.mine SET status = 'nope'}, 'ID004', 'the guard holds for its owner');
as_gives('gowner', q{SELECT idem_unguard('gs.mine', 'status'); SELECT 'unguarded'}, "\nunguarded",
	'the owner may remove the guard');

# idem_grant's levels.  'write': leases (bound to the session too), marking
# an effect started, and the records' count in idem_health; not the outbox
# (idem_outbox_grant gives it per topic and group), not idem_maintain, not
# machines.  'define' adds machines; idem_revoke takes it all back.
su(q{CREATE ROLE granted LOGIN; SELECT idem_grant('granted')});
as_gives('granted', q{SELECT outcome FROM idem_begin('g', 'bound', lease => '1 hour', bind_to_session => true)},
	'acquired', "idem_grant 'write': a lease bound to the session");
as_gives('granted', q{SELECT token AS tok FROM idem_begin('g', 'effect', lease => '1 hour') \gset
	SELECT idem_effect_started('g', 'effect', :tok) IS NOT NULL}, 't',
	"idem_grant 'write': idem_effect_started marks the lease's effect");
as_gives('granted', q{SELECT string_agg(part || ':' || coalesce(waiting::text, 'null'), ',' ORDER BY part) FROM idem_health},
	'outbox:null,records:0', "idem_grant 'write': idem_health counts the records, not the outbox");
for my $sql (
	q{SELECT idem_maintain()},
	q{SELECT idem_publish('t', '{}', key => 'k')},
	q{SELECT idem_outbox_ack_many('c', ARRAY['00000000-0000-8000-8000-000000000000']::uuid[])},
	q{SELECT idem_outbox_grant('granted', 'publish', 't')},
	q{SELECT idem_outbox_revoke('granted', 'publish', 't')},
	q{SELECT idem_machine_define('gm', '{"initial": ["a"], "transitions": {}}')})
{
	as_fails('granted', $sql, '42501', "idem_grant 'write': $sql fails with 42501");
}
su(q{SELECT idem_grant('granted', 'define')});
as_gives('granted', q{SELECT idem_machine_define('gm', '{"initial": ["a"], "transitions": {}}')}, '',
	"idem_grant 'define': idem_machine_define works");
as_fails('granted', q{SELECT idem_maintain()}, '42501', "idem_grant 'define': idem_maintain still fails with 42501");
su(q{SELECT idem_revoke('granted')});
as_fails('granted', q{SELECT outcome FROM idem_begin('g', 'again')}, '42501',
	'after idem_revoke, idem_begin fails with 42501');
as_fails('granted', q{SELECT idem_machine_drop('gm')}, '42501',
	'after idem_revoke, idem_machine_drop fails with 42501');

#--------------------------------------------------------------------------
# 3. Row-level security: tenants, for leases, batches and tokens.
#--------------------------------------------------------------------------
su(q{
	GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records TO ta, tb;
	GRANT USAGE ON SEQUENCE idem_token_seq TO ta, tb;
	ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
	CREATE POLICY tenant ON idem_records
	    USING (scope = current_user) WITH CHECK (scope = current_user);
});
as_gives('tb', q{SELECT idem_claim('tb', 'k1'); SELECT idem_complete('tb', 'k1', '{"b": 1}')}, "t\n",
	'tenant b claims and completes a key');
my $tb_token = (as('tb', q{SELECT token FROM idem_begin('tb', 'lease1', lease => '1 hour')}))[1];
my $tb_one   = (as('tb', q{SELECT idem_token_issue('tb')}))[1];
as_gives('tb', q{SELECT claimed FROM idem_claim_many('tb', ARRAY['m1'])}, 't', 'tenant b claims a batch');
my $tb_rows = su(q{SELECT md5(string_agg(r::text, '|' ORDER BY key)) FROM idem_records r WHERE scope = 'tb'});

for my $c (
	[ q{SELECT idem_lookup('tb', 'k1') IS NULL},               'ok', 't' ],
	[ q{SELECT idem_await('tb', 'lease1', '0') IS NULL},       'ok', 't' ],
	[ q{SELECT idem_release('tb', 'k1')},                      'ok', 'f' ],
	[ qq{SELECT idem_token_consume('tb', '$tb_one')},          'ok', 'f' ],
	[ q{SELECT idem_purge()},                                  'ok', '0' ],
	[ q{SELECT count(*) FROM idem_summary() WHERE scope = 'tb'}, 'ok', '0' ],
	[ q{SELECT idem_claim('tb', 'k1')},                        'err', '42501' ],
	[ q{SELECT idem_claim('tb', 'brand-new')},                 'err', '42501' ],
	[ q{SELECT * FROM idem_begin('tb', 'k1')},                 'err', '42501' ],
	[ q{SELECT * FROM idem_begin('tb', 'lease1')},             'err', '42501' ],
	[ q{SELECT * FROM idem_claim_many('tb', ARRAY['k1'])},     'err', '42501' ],
	[ q{SELECT * FROM idem_claim_many('tb', ARRAY['m1', 'x'])}, 'err', '42501' ],
	[ q{SELECT idem_token_issue('tb')},                        'err', '42501' ],
	[ q{SELECT idem_complete('tb', 'k1', '1')},                'err', 'ID002' ],
	[ qq{SELECT idem_heartbeat('tb', 'lease1', $tb_token)},    'err', 'ID002' ],
	[ qq{SELECT idem_finish('tb', 'lease1', $tb_token, '"stolen"')}, 'err', 'ID002' ],
	[ qq{SELECT idem_fail('tb', 'lease1', $tb_token, '"stolen"', false)}, 'err', 'ID002' ],)
{
	my ($sql, $kind, $want) = @$c;
	if ($kind eq 'ok') { as_gives('ta', $sql, $want, "tenant a: $sql gives $want"); }
	else               { as_fails('ta', $sql, $want, "tenant a: $sql fails with $want"); }
}
is(su(q{SELECT md5(string_agg(r::text, '|' ORDER BY key)) FROM idem_records r WHERE scope = 'tb'}),
	$tb_rows, "tenant b's records are untouched");
as_gives('tb', qq{SELECT idem_finish('tb', 'lease1', $tb_token, '"mine"'); SELECT idem_token_consume('tb', '$tb_one')},
	"\nt", "tenant b still finishes its lease and uses its token");
su(q{DROP POLICY tenant ON idem_records; ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY});

#--------------------------------------------------------------------------
# 4. search_path hijacking.
#--------------------------------------------------------------------------
su(q{
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE FUNCTION evil.trap() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'hijacked: decoy % written', TG_TABLE_NAME; END $$;
CREATE TABLE evil.idem_records (LIKE public.idem_records);
CREATE TABLE evil.idem_machines (LIKE public.idem_machines);
CREATE TABLE evil.idem_transition_log (LIKE public.idem_transition_log);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON evil.idem_records FOR EACH ROW EXECUTE FUNCTION evil.trap();
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON evil.idem_machines FOR EACH ROW EXECUTE FUNCTION evil.trap();
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON evil.idem_transition_log FOR EACH ROW EXECUTE FUNCTION evil.trap();
GRANT ALL ON ALL TABLES IN SCHEMA evil TO PUBLIC;
CREATE SEQUENCE evil.idem_token_seq START 1000000000000;
CREATE SEQUENCE evil.idem_transition_log_id_seq START 1000000000000;
GRANT ALL ON ALL SEQUENCES IN SCHEMA evil TO PUBLIC;
CREATE TYPE evil.idem_record AS (hijacked boolean);
});
# Shadows of what the extension's SQL could call unqualified.
my @shadow_functions = (
	'now()', 'clock_timestamp()', 'statement_timestamp()', 'transaction_timestamp()',
	'nextval(regclass)', 'currval(regclass)', 'setval(regclass, bigint)',
	'octet_length(text)', 'length(text)', 'lower(text)', 'upper(text)', 'sha256(bytea)',
	'encode(bytea, text)', 'pg_current_xact_id()', 'txid_current()', 'format(text)',
	'jsonb_build_object(text, bigint)', 'jsonb_build_object(text, integer)',
	'jsonb_build_object(text, text)', 'to_jsonb(text)', 'array_length(anyarray, integer)',
	'unnest(text[])', 'quote_ident(text)', 'quote_literal(text)', 'textcat(text, text)',
	'generate_series(integer, integer)', 'pg_sleep(double precision)');
my $shadow_sql = '';
for my $f (@shadow_functions)
{
	(my $name = $f) =~ s/\(.*//;
	(my $args = $f) =~ s/^[^(]*\(|\)$//g;
	my @types = grep { $_ ne '' } map { s/^\s+|\s+$//gr } split /,/, $args;
	my $ret = $name eq 'unnest' ? 'SETOF text' : $name eq 'generate_series' ? 'SETOF integer' : 'text';
	$ret = 'timestamptz' if $name =~ /timestamp|now/;
	$ret = 'bigint'      if $name =~ /val$|txid/;
	$ret = 'jsonb'       if $name =~ /jsonb|to_jsonb/;
	$ret = 'xid8'        if $name eq 'pg_current_xact_id';
	$ret = 'integer'     if $name =~ /length/;
	$ret = 'bytea'       if $name eq 'sha256';
	$ret = 'void'        if $name eq 'pg_sleep';
	my $i = 0;
	my $params = join(', ', map { 'p' . ++$i . " $_" } @types);
	$shadow_sql .= "CREATE FUNCTION evil.$name($params) RETURNS $ret LANGUAGE plpgsql AS "
	  . "\$\$ BEGIN RAISE EXCEPTION 'hijacked: function $name'; END \$\$;\n";
}
my @shadow_operators = (
	[ '=', 'text', 'text' ], [ '<>', 'text', 'text' ], [ '||', 'text', 'text' ],
	[ '<', 'text', 'text' ], [ '>', 'text', 'text' ], [ '~~', 'text', 'text' ],
	[ '=', 'bigint', 'bigint' ], [ '>', 'bigint', 'bigint' ], [ '<', 'bigint', 'bigint' ],
	[ '=', 'integer', 'integer' ], [ '<', 'integer', 'integer' ], [ '>', 'integer', 'integer' ],
	[ '+', 'integer', 'integer' ], [ '>=', 'integer', 'integer' ], [ '<=', 'integer', 'integer' ],
	[ '=', 'smallint', 'smallint' ], [ '=', 'oid', 'oid' ], [ '=', 'tid', 'tid' ],
	[ '=', 'name', 'name' ], [ '=', 'boolean', 'boolean' ], [ '=', 'bytea', 'bytea' ],
	[ '=', '"char"', '"char"' ], [ '=', 'jsonb', 'jsonb' ],
	[ '=', 'timestamptz', 'timestamptz' ], [ '<', 'timestamptz', 'timestamptz' ],
	[ '<=', 'timestamptz', 'timestamptz' ], [ '>', 'timestamptz', 'timestamptz' ],
	[ '>=', 'timestamptz', 'timestamptz' ], [ '+', 'timestamptz', 'interval' ],
	[ '-', 'timestamptz', 'interval' ], [ '>', 'interval', 'interval' ],
	[ '<=', 'interval', 'interval' ], [ '->', 'jsonb', 'text' ], [ '->>', 'jsonb', 'text' ],
	[ '?', 'jsonb', 'text' ], [ '=', 'xid8', 'xid8' ], [ '@>', 'text[]', 'text[]' ]);
my $n = 0;
for my $o (@shadow_operators)
{
	my ($op, $l, $r) = @$o;
	$n++;
	$shadow_sql .= "CREATE FUNCTION evil.op$n(a $l, b $r) RETURNS boolean LANGUAGE plpgsql AS "
	  . "\$\$ BEGIN RAISE EXCEPTION 'hijacked: operator $l $op $r'; END \$\$;\n"
	  . "CREATE OPERATOR evil.$op (LEFTARG = $l, RIGHTARG = $r, FUNCTION = evil.op$n);\n";
}
$shadow_sql .= q{
CREATE FUNCTION evil.agg_trap(bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'hijacked: aggregate count'; END $$;
CREATE AGGREGATE evil.count(*) (SFUNC = evil.agg_trap, STYPE = bigint);
CREATE FUNCTION evil.agg_trap2(text, text) RETURNS text LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'hijacked: aggregate string_agg'; END $$;
CREATE AGGREGATE evil.string_agg(text) (SFUNC = evil.agg_trap2, STYPE = text);
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA evil TO PUBLIC;
};
su($shadow_sql);

# One session under a hostile search_path, using every function.  Each
# line of output is checked; errors are reported with their message.
sub hijack_script
{
	my ($p) = @_;    # a prefix, so that two runs do not collide
	return qq{
\\set VERBOSITY verbose
CREATE TEMP TABLE idem_records (LIKE public.idem_records);
CREATE TEMP TABLE idem_machines (LIKE public.idem_machines);
CREATE TEMP TABLE idem_transition_log (LIKE public.idem_transition_log);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.idem_records FOR EACH ROW EXECUTE FUNCTION evil.trap();
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.idem_machines FOR EACH ROW EXECUTE FUNCTION evil.trap();
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.idem_transition_log FOR EACH ROW EXECUTE FUNCTION evil.trap();
CREATE TABLE ${p}_orders (id int PRIMARY KEY, status text, v int NOT NULL DEFAULT 0);
SET search_path = evil, pg_catalog, public;
SELECT public.idem_claim('${p}', 'k1');
SELECT public.idem_claim('${p}', 'k1');
SELECT public.idem_claim('${p}-default-scope-key');
SELECT public.idem_claim('${p}', 'k2', '1 hour', 'fp');
SELECT public.idem_claim('${p}', 'k2', '1 hour', 'fp');
SELECT public.idem_complete('${p}', 'k1', '{"r": 1}');
SELECT (public.idem_lookup('${p}', 'k1')).result;
SELECT public.idem_release('${p}', 'k2');
SELECT key, claimed FROM public.idem_claim_many('${p}', ARRAY['b2', 'b1', 'k1', 'b1']);
SELECT outcome, token AS tok FROM public.idem_begin('${p}', 'l1', lease => '1 hour') \\gset
SELECT :'outcome';
SELECT public.idem_heartbeat('${p}', 'l1', :tok, '2 hours') IS NOT NULL;
SELECT public.idem_finish('${p}', 'l1', :tok, '{"done": true}');
SELECT (public.idem_await('${p}', 'l1', '0')).status;
SELECT token AS tok2 FROM public.idem_begin('${p}', 'l2') \\gset
SELECT public.idem_fail('${p}', 'l2', :tok2, '{"e": 1}', true);
SELECT outcome FROM public.idem_begin('${p}', 'l2');
SELECT public.idem_token_issue('${p}') AS one_time \\gset
SELECT public.idem_token_consume('${p}', :'one_time');
SELECT public.idem_token_consume('${p}', :'one_time');
SELECT public.idem_purge(10);
SELECT scope FROM public.idem_summary() WHERE scope OPERATOR(pg_catalog.=) '${p}';
SELECT public.idem_machine_define('${p}_m', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": []}}');
SELECT public.idem_can_transition('${p}_m', 'new', 'paid');
SELECT public.idem_transition('${p}_m', 'new', 'paid');
SELECT public.idem_guard_allows('${p}_m', 'paid', 'new');
SELECT public.idem_sources('${p}_m', 'paid');
SELECT public.idem_guard('public.${p}_orders', 'status', '${p}_m', NULL, true);
INSERT INTO public.${p}_orders VALUES (1, 'new');
UPDATE public.${p}_orders SET status = 'paid';
UPDATE public.${p}_orders SET status = 'new';
SELECT status, v FROM public.${p}_orders;
SELECT public.idem_unguard('public.${p}_orders', 'status');
SELECT public.idem_machine_drop('${p}_m');
SELECT :tok OPERATOR(pg_catalog.<) 1000000000000, :tok2 OPERATOR(pg_catalog.>) :tok;
RESET search_path;
SELECT (SELECT count(*) FROM pg_temp.idem_records) + (SELECT count(*) FROM pg_temp.idem_machines)
     + (SELECT count(*) FROM pg_temp.idem_transition_log);
};
}

my @expected_output = (
	't', 'f', 't', 't', 'f', '', '{"r": 1}', 't',
	'b2|t', 'b1|t', 'k1|f', 'b1|f',
	'acquired', 't', '', 'completed', '', 'acquired', 't', 'f', '0', 'PFX', '',
	't', 'paid', 'f', '{new}', '', 'paid|0', '', '', 't|t', '0');

sub run_hijack
{
	my ($role, $p) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', hijack_script($p),
		extra_params => [ '-U', $role ], on_error_stop => 0);
	my @errors = ($err =~ /ERROR:\s+(\S+: [^\n]*)/g);
	is_deeply(\@errors, [ "ID004: guarded update of public.${p}_orders: illegal transition from \"paid\" to \"new\"" ],
		"$role under a hostile search_path: the only error is the guard refusing paid -> new")
	  or diag($err);
	my @want = map { $_ eq 'PFX' ? $p : $_ } @expected_output;
	is_deeply([ split /\n/, $out, -1 ], \@want,
		"$role under a hostile search_path: every function answers correctly");
	return;
}

su(q{GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records TO app;
     GRANT USAGE ON SEQUENCE idem_token_seq TO app;
     GRANT INSERT, UPDATE, DELETE ON idem_machines TO app;
     GRANT SELECT, INSERT ON idem_transition_log TO app;
     GRANT USAGE ON SEQUENCE idem_transition_log_id_seq TO app;
     GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;
     GRANT CREATE ON SCHEMA public TO app;});
my ($ret_h, $out_h, $err_h);
run_hijack('postgres', 'su');
run_hijack('app', 'app');
is( su(q{
	SELECT (SELECT count(*) FROM evil.idem_records) + (SELECT count(*) FROM evil.idem_machines)
	     + (SELECT count(*) FROM evil.idem_transition_log) || '|' ||
	       (SELECT is_called FROM evil.idem_token_seq)::text || '|' ||
	       (SELECT is_called FROM evil.idem_transition_log_id_seq)::text}),
	'0|false|false', 'no decoy table or sequence was touched');
is( su(q{SELECT count(*) FROM idem_transition_log WHERE table_name LIKE '%orders'
         AND to_state IN ('new', 'paid')}),
	'4', 'the history went to the real log (two changes per run)');

# The triggers idem_guard installs are parsed when it runs: under a
# hostile search_path, nothing in them may resolve to the hostile schema,
# or every later write of the table (by anyone, with any search_path)
# would call the attacker's code.
($ret_h, $out_h, $err_h) = $node->psql('postgres', q{
	CREATE TABLE hv_orders (id int PRIMARY KEY, status text, v int NOT NULL DEFAULT 0);
	SELECT public.idem_machine_define('hv_m', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
	SET search_path = evil, pg_catalog, public;
	SELECT public.idem_guard('public.hv_orders', 'status', 'hv_m', 'v', true);},
	on_error_stop => 1);
is($err_h, '', 'idem_guard with a version column and history under a hostile search_path');
is( su(q{SELECT string_agg(DISTINCT t.tgname || ' -> ' || (pg_identify_object(d.refclassid, d.refobjid, 0)).identity, ', ')
         FROM pg_depend d JOIN pg_trigger t ON d.classid = 'pg_trigger'::regclass AND d.objid = t.oid
         WHERE t.tgrelid = 'hv_orders'::regclass
           AND (pg_identify_object(d.refclassid, d.refobjid, 0)).schema = 'evil'}),
	'', 'no trigger of the guard depends on anything in the hostile schema');
($ret_h, $out_h, $err_h) = $node->psql('postgres', q{
	INSERT INTO hv_orders VALUES (1, 'new');
	UPDATE hv_orders SET status = 'paid';
	SELECT status || '|' || v FROM hv_orders;});
is($out_h . $err_h, 'paid|1', 'the guarded table works for a session with a normal search_path');

#--------------------------------------------------------------------------
# 5. Identifiers given to idem_guard are quoted.
#--------------------------------------------------------------------------
my $schema = q{"we""ird sch; ema"};
my $table  = q{"ta""ble; DROP TABLE victim; --"};
my $qt     = "$schema.$table";
my $id     = q{"i""d; x"};
my $st     = q{"st""at us; DELETE FROM victim; --"};
my $ver    = q{"ver""sion; --"};
su(qq{
CREATE TABLE victim (x int);
INSERT INTO victim VALUES (1);
CREATE SCHEMA $schema;
CREATE TABLE $qt ($id int PRIMARY KEY, $st text, $ver int NOT NULL DEFAULT 0);
SELECT idem_machine_define(E'm''a"chine; --', '{"initial": ["new"], "transitions": {"new": ["done"], "done": []}}');
});
my $st_name = q{st"at us; DELETE FROM victim; --};
my $ver_name = q{ver"sion; --};
is( su(qq{SELECT idem_guard('$qt'::regclass, '} . ($st_name =~ s/'/''/gr) . q{', E'm''a"chine; --', '}
		  . ($ver_name =~ s/'/''/gr) . q{', true)}),
	'', 'idem_guard accepts a table and columns named with quotes, spaces and semicolons');
su(qq{INSERT INTO $qt VALUES (1, 'new'); UPDATE $qt SET $st = 'done' WHERE $id = 1});
my ($ret, $out, $err) = $node->psql('postgres', qq{UPDATE $qt SET $st = 'new' WHERE $id = 1},
	extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
like($err, qr/ID004/, 'the guard on the oddly named column refuses an illegal transition');
is(su(qq{SELECT $st || '|' || $ver FROM $qt}), 'done|1', 'the status and version columns are right');
is(su(q{SELECT count(*) FROM victim}), '1', 'nothing was injected');
is( su(q{SELECT string_agg(table_name || '|' || status_column || '|' || row_key::text || '|'
	                       || coalesce(from_state, '~') || '|' || to_state, E'\n' ORDER BY id)
	      FROM idem_transition_log WHERE status_column LIKE 'st"at%'}),
	q{"we""ird sch; ema"."ta""ble; DROP TABLE victim; --"|st"at us; DELETE FROM victim; --|{"i\"d; x": 1}|~|new}
	  . "\n"
	  . q{"we""ird sch; ema"."ta""ble; DROP TABLE victim; --"|st"at us; DELETE FROM victim; --|{"i\"d; x": 1}|new|done},
	'the history names the table, column and key exactly');
($ret, $out, $err) = $node->psql('postgres', q{SELECT idem_machine_drop(E'm''a"chine; --')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/2BP01: .*\n.*ta""ble; DROP TABLE victim/, 'a machine used by the odd guard cannot be dropped; the detail names the table');
is(su(qq{SELECT idem_unguard('$qt'::regclass, '} . ($st_name =~ s/'/''/gr) . q{')}),
	'', 'idem_unguard removes the guard of the oddly named column');
su(qq{UPDATE $qt SET $st = 'new'});
is(su(q{SELECT idem_machine_drop(E'm''a"chine; --')}), '', 'then the machine can be dropped');
is(su(q{SELECT count(*) FROM victim}), '1', 'still nothing injected');

# Long column names (63 bytes) that differ only at the end get distinct
# guards.
my $c1 = 'c' x 59 . '_one';
my $c2 = 'c' x 59 . '_two';
su(qq{
CREATE TABLE longcols (id int PRIMARY KEY, "$c1" text, "$c2" text);
SELECT idem_machine_define('lm', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
SELECT idem_guard('longcols', '$c1', 'lm', history => true);
SELECT idem_guard('longcols', '$c2', 'lm', history => true);
INSERT INTO longcols VALUES (1, 'a', 'a');
SELECT idem_unguard('longcols', '$c1');
UPDATE longcols SET "$c1" = 'zz';
});
($ret, $out, $err) = $node->psql('postgres', qq{UPDATE longcols SET "$c2" = 'zz'},
	extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
like($err, qr/ID004/, 'guards on long column names that differ only at the end are distinct');

# Columns whose names are another column's name plus a trigger suffix.
su(q{
CREATE TABLE suffixes (id int PRIMARY KEY, x text, x_log text, x_insert text, x_version text, v int NOT NULL DEFAULT 0);
SELECT idem_guard('suffixes', 'x', 'lm', 'v', true);
});
for my $c ('x_log', 'x_insert', 'x_version')
{
	($ret, $out, $err) = $node->psql('postgres', qq{SELECT idem_guard('suffixes', '$c', 'lm')},
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
	is($err, '', "column $c can be guarded next to a guarded column x");
}

$node->stop;
done_testing();
