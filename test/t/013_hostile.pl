# Hostile input: every function gets the documented answer or error, never
# a crash, never a silently wrong result.
#   - NULL in every argument position of every function of the extension
#     (the list is read from the catalog: a function without a row in
#     %null_rules below fails the test until its NULL behaviour is stated);
#   - keys and scopes at and one byte beyond their limits, counted in
#     bytes (multibyte, 4-byte characters), for every function taking one;
#   - NUL-free binary-ish text (control characters, escapes, format
#     directives, quotes), multibyte text, and whitespace, case and
#     Unicode-normalisation variants, which are distinct keys;
#   - huge values: results and errors of several MB (TOASTed, checked with
#     verify_heapam), a 20 MB fingerprint, a batch of 50000 keys;
#   - huge, odd and malformed state machine definitions;
#   - zero, negative, infinite and overflowing intervals;
#   - malformed one-time tokens and batch arrays.
# At the end the server has not restarted and logged no crash.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hostile');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf('postgresql.conf', "log_statement = none\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency; CREATE EXTENSION amcheck;');
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $pg_version = $node->safe_psql('postgres', 'SHOW server_version_num');

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY sqlstate');

# ('OK', output) or ('ERR', sqlstate)
sub run
{
	my ($sql) = @_;
	$s->{stderr} = '';
	my ($out) = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ('ERR', $1) if $err =~ /ERROR:\s+([0-9A-Z]{5})/;
	die "unexpected stderr for $sql: $err" if $err ne '';
	return ('OK', $out);
}

sub gives
{
	my ($sql, $want, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($k, $v) = run($sql);
	return is("$k: $v", "OK: $want", $name);
}

sub fails
{
	my ($sql, $code, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($k, $v) = run($sql);
	return is("$k: $v", "ERR: $code", $name);
}

# Run inside a transaction that is rolled back afterwards.
sub in_rollback
{
	my ($code) = @_;
	run('BEGIN');
	$code->();
	run('ROLLBACK');
	return;
}

#--------------------------------------------------------------------------
# NULL in every argument position.
#--------------------------------------------------------------------------

# function => [setup SQL, valid arguments, expected answer per position
# when that argument alone is NULL: an SQLSTATE, 'ok', or 'ok:<output>'].
my %null_rules = (
	'idem_publish(text,jsonb,text,text,jsonb,text,text,integer)' => [q{SELECT idem_claim('s','k')}, [q{'t'},q{'{}'},q{'k'},q{'a'},q{'{}'},q{'s'},q{'T'},'0'], ['22004','ok:efd53398-9227-8cc2-808d-7bf0464890e3','22004','ok:efd53398-9227-8cc2-808d-7bf0464890e3','ok:efd53398-9227-8cc2-808d-7bf0464890e3','ok:f550a9ff-6c38-8a44-843b-dd30c90707c3','ok:efd53398-9227-8cc2-808d-7bf0464890e3','22004']],
	'idem_publish_sql(text,jsonb,text,text,jsonb,text,text,integer)' => [q{SELECT idem_claim('s','k')}, [q{'t'},q{'{}'},q{'k'},q{'a'},q{'{}'},q{'s'},q{'T'},'0'], ['22004','ok:efd53398-9227-8cc2-808d-7bf0464890e3','22004','ok:efd53398-9227-8cc2-808d-7bf0464890e3','ok:efd53398-9227-8cc2-808d-7bf0464890e3','ok:f550a9ff-6c38-8a44-843b-dd30c90707c3','ok:efd53398-9227-8cc2-808d-7bf0464890e3','22004']],
	'idem_outbox_id(text,text,text,integer)' => ['', [q{'t'},q{'k'},q{'s'},'0'], ['ok:','ok:','ok:f550a9ff-6c38-8a44-843b-dd30c90707c3','ok:']],
	'idem_xid8_near(xid,xid8)' => ['', [q{'1'},q{'1'}], ['ok:','ok:']],
	'idem_xact_claims()' => ['', [], []],
	'idem_outbox_topic(text,text,interval,boolean)' => ['', [q{'t'},q{'table'},q{'1 day'},'true'], ['22004','ok:','ok:','ok:']],
	'idem_outbox_subscribe(text,text,boolean)' => ['', [q{'c'},q{'t'},'false'], ['22004','22004','22004']],
	'idem_outbox_unsubscribe(text,text)' => ['', [q{'c'},q{'t'}], ['22004','22004']],
	'idem_outbox_advance(text)' => ['', [q{'c'}], ['ok:']],
	'idem_outbox_fetch(text,integer,interval)' => ['', [q{'c'},'10',q{'1 minute'}], ['22004','22004','22004']],
	'idem_outbox_ack(text,uuid)' => ['', [q{'c'},q{'00000000-0000-8000-8000-000000000000'}], ['22004','22004']],
	'idem_inbox(text,uuid,interval,text)' => ['', [q{'c'},q{'00000000-0000-8000-8000-000000000001'},q{'1 day'},q{'fp'}], ['22004','22004','ok:t','ok:t']],
	'idem_outbox_purge(integer)' => ['', ['10'], ['22004']],
	'idem_http_parse_key(text)' => [ '', [q{'k'}], ['ok:'] ],
	'idem_http_problem(integer,text,text,text,text,jsonb)' => [
		'', [ '500', q{'t'}, q{'d'}, q{'c'}, q{'u'}, q{'{}'} ], [ '22004', '22004', 'ok', 'ok', 'ok', 'ok' ] ],
	'idem_http_result(integer,jsonb,bytea,text[])' =>
	  [ '', [ '200', q{'{}'}, q{'x'}, q{ARRAY['etag']} ], [ '22004', 'ok', 'ok', 'ok' ] ],
	'idem_http_begin(text,text,text,bytea,text,boolean,interval,text,text,integer,text)' => [ '',
		[ q{'nk'}, q{'POST'}, q{'/p'}, q{'x'}, q{'s'}, 'true', q{'1 day'}, q{'text/plain'}, q{'u'}, '1', q{'reconcile'} ],
		[ 'ok', '22004', '22004', 'ok', '22004', '22004', 'ok', 'ok', 'ok', '22004', '22004' ] ],
	'idem_http_finish(text,integer,jsonb,bytea,text,text[])' => [
		q{SELECT idem_http_begin('nk', 'POST', '/p', scope => 's')},
		[ q{'nk'}, '200', q{'{}'}, q{'x'}, q{'s'}, q{ARRAY['etag']} ], [ 'ok:', '22004', 'ok:', 'ok:', '22004', 'ok:' ] ],
	'idem_http_postgrest_raise(idem_http_response)' => [ '', [q{idem_http_problem(409, 't')}], ['22004'] ],
	'idem_http_postgrest_pre_request(text,boolean,text[],interval,text)' =>
	  [ '', [ q{'s'}, 'true', q{'{POST}'}, q{'1 day'}, q{'u'} ], [ 'ok:', 'ok:', 'ok:', 'ok:', 'ok:' ] ],
	'idem_http_postgrest_rpc(jsonb,text,boolean,interval,text)' => [
		q{SELECT set_config('request.headers', '{"idempotency-key": "nk"}', true)},
		[ q{'{}'}, q{'s'}, 'true', q{'1 day'}, q{'u'} ], [ 'ok', '22004', '22004', 'ok', 'ok' ] ],
	'idem_http_postgrest_finish(integer,jsonb,bytea,text[])' =>
	  [ '', [ '200', q{'{}'}, q{'x'}, q{ARRAY['etag']} ], [ '22004', 'ok:', 'ok:', 'ok:' ] ],
	'idem_claim(text)' => [ '', [q{'nk'}], ['22004'] ],
	'idem_claim(text,text,interval,text)' =>
	  [ '', [ q{'s'}, q{'nk'}, q{'1 day'}, q{'fp'} ], [ '22004', '22004', 'ok:t', 'ok:t' ] ],
	'idem_complete(text,text,jsonb)' => [
		q{SELECT idem_claim('s', 'nk')},
		[ q{'s'}, q{'nk'}, q{'{}'} ],
		[ '22004', '22004', '22004' ]
	],
	'idem_lookup(text,text)'  => [ '', [ q{'s'}, q{'nk'} ], [ '22004', '22004' ] ],
	'idem_release(text,text)' => [ '', [ q{'s'}, q{'nk'} ], [ '22004', '22004' ] ],
	'idem_purge(integer)'     => [ '', ['10'], ['22004'] ],
	'idem_claim_many(text,text[],interval)' => [
		'', [ q{'s'}, q{ARRAY['a', 'b']}, q{'1 day'} ],
		[ '22004', '22004', 'ok:2' ]
	],
	'idem_begin(text,text,interval,interval,text,boolean)' => [
		'', [ q{'s'}, q{'nk'}, q{'1 minute'}, q{'1 day'}, q{'fp'}, 'true' ],
		[ '22004', '22004', '22004', 'ok:1', 'ok:1', '22004' ]
	],
	'idem_effect_started(text,text,bigint)' => [
		q{SELECT token AS tok FROM idem_begin('s', 'nk') \gset},
		[ q{'s'}, q{'nk'}, ':tok' ],
		[ '22004', '22004', '22004' ]
	],
	'idem_maintain(integer)' => [ '', ['10'], ['22004'] ],
	'idem_outbox_ack_many(text,uuid[])' =>
	  [ '', [ q{'c'}, q{ARRAY[gen_random_uuid()]} ], [ '22004', '22004' ] ],
	'idem_outbox_grant(regrole,text,text,text)' => [ q{CREATE ROLE hostile_og},
		[ q{'hostile_og'}, q{'publish'}, q{'t'}, q{'g'} ], [ '22004', '22023', '22023', 'ok' ] ],
	'idem_outbox_revoke(regrole,text,text,text)' => [ q{CREATE ROLE hostile_or},
		[ q{'hostile_or'}, q{'publish'}, q{'t'}, q{'g'} ], [ '22004', 'ok', 'ok', 'ok' ] ],
	'idem_http_check(integer,jsonb,text,text[])' =>
	  [ '', [ '200', q{'{}'}, q{'eA=='}, q{ARRAY['etag']} ], [ 'ok', 'ok', 'ok', 'ok' ] ],
	'idem_http_fingerprint(text,text,bytea,text,integer)' =>
	  [ '', [ q{'POST'}, q{'/p'}, q{'x'}, q{'text/plain'}, '2' ], [ '22004', '22004', 'ok', 'ok', '22004' ] ],
	'idem_heartbeat(text,text,bigint,interval)' => [
		q{SELECT token AS tok FROM idem_begin('s', 'nk') \gset},
		[ q{'s'}, q{'nk'}, ':tok', q{'1 minute'} ],
		[ '22004', '22004', '22004', 'ok' ]
	],
	'idem_finish(text,text,bigint,jsonb)' => [
		q{SELECT token AS tok FROM idem_begin('s', 'nk') \gset},
		[ q{'s'}, q{'nk'}, ':tok', q{'{}'} ],
		[ '22004', '22004', '22004', 'ok:' ]
	],
	'idem_fail(text,text,bigint,jsonb,boolean)' => [
		q{SELECT token AS tok FROM idem_begin('s', 'nk') \gset},
		[ q{'s'}, q{'nk'}, ':tok', q{'{}'}, 'true' ],
		[ '22004', '22004', '22004', 'ok:', '22004' ]
	],
	'idem_await(text,text,interval)' =>
	  [ '', [ q{'s'}, q{'nk'}, q{'0'} ], [ '22004', '22004', '22004' ] ],
	'idem_token_issue(text,interval)' => [ '', [ q{'s'}, q{'1 hour'} ], [ '22004', '22004' ] ],
	# STRICT: NULL in, NULL out (a CHECK accepts it; the column is NOT NULL).
	'idem_status_is_valid(text)' => [ '', [ q{'claimed'} ], [ 'ok:' ] ],
	# STRICT: a NULL role or access level grants nothing.
	'idem_grant(regrole,text)' => [ q{CREATE ROLE hostile_grantee},
		[ q{'hostile_grantee'}, q{'read'} ], [ 'ok:', 'ok:' ] ],
	'idem_revoke(regrole)' => [ q{CREATE ROLE hostile_revokee},
		[ q{'hostile_revokee'} ], [ 'ok:' ] ],
	'idem_token_consume(text,text)' =>
	  [ '', [ q{'s'}, q{'0123456789abcdef0123456789abcdef'} ], [ '22004', '22004' ] ],
	'idem_machine_define(text,jsonb)' => [
		'', [ q{'nm'}, q{'{"initial": ["a"], "transitions": {}}'} ],
		[ '22004', '22004' ]
	],
	'idem_machine_drop(text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {}}')},
		[q{'nm'}], ['22004']
	],
	'idem_can_transition(text,text,text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {"a": ["b"]}}')},
		[ q{'nm'}, q{'a'}, q{'b'} ],
		[ '22004', 'ok:f', 'ok:f' ]
	],
	'idem_transition_strict(text,text,text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {"a": ["b"]}}')},
		[ q{'nm'}, q{'a'}, q{'b'} ],
		[ '22004', '22004', '22004' ]
	],
	'idem_transition(text,text,text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {"a": ["b"]}}')},
		[ q{'nm'}, q{'a'}, q{'b'} ],
		[ '22004', '22004', '22004' ]
	],
	'idem_sources(text,text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {"a": ["b"]}}')},
		[ q{'nm'}, q{'b'} ],
		[ '22004', '22004' ]
	],
	'idem_guard_allows(text,text,text)' => [
		q{SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {"a": ["b"]}}')},
		[ q{'nm'}, q{'a'}, q{'b'} ],
		[ '22004', 'ok:f', 'ok:f' ]
	],
	'idem_guard(regclass,name,text,name,boolean)' => [
		q{CREATE TABLE nt (id int PRIMARY KEY, st text, v int NOT NULL DEFAULT 0);
		  SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {}}')},
		[ q{'nt'}, q{'st'}, q{'nm'}, q{'v'}, 'true' ],
		[ '22004', '22004', '22004', 'ok:', '22004' ]
	],
	'idem_unguard(regclass,name)' => [
		q{CREATE TABLE nt (id int PRIMARY KEY, st text);
		  SELECT idem_machine_define('nm', '{"initial": ["a"], "transitions": {}}');
		  SELECT idem_guard('nt', 'st', 'nm')},
		[ q{'nt'}, q{'st'} ],
		[ '22004', '22004' ]
	],
	# The _at twins, on records without a shard key: 55000 before any
	# argument is looked at (test/sql/shard_key.sql has them with one).
	'idem_claim_at("any",text,text,interval,text)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, q{'1 day'}, q{'fp'} ], [ '55000', '55000', '55000', '55000', '55000' ] ],
	'idem_complete_at("any",text,text,jsonb)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, q{'{}'} ], [ '55000', '55000', '55000', '55000' ] ],
	'idem_lookup_at("any",text,text)' =>
	  [ '', [ '1', q{'s'}, q{'nk'} ], [ '55000', '55000', '55000' ] ],
	'idem_release_at("any",text,text)' =>
	  [ '', [ '1', q{'s'}, q{'nk'} ], [ '55000', '55000', '55000' ] ],
	'idem_begin_at("any",text,text,interval,interval,text,boolean)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, q{'1 minute'}, q{'1 day'}, q{'fp'}, 'true' ], [ '55000', '55000', '55000', '55000', '55000', '55000', '55000' ] ],
	'idem_effect_started_at("any",text,text,bigint)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, '1' ], [ '55000', '55000', '55000', '55000' ] ],
	'idem_heartbeat_at("any",text,text,bigint,interval)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, '1', q{'1 minute'} ], [ '55000', '55000', '55000', '55000', '55000' ] ],
	'idem_finish_at("any",text,text,bigint,jsonb)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, '1', q{'{}'} ], [ '55000', '55000', '55000', '55000', '55000' ] ],
	'idem_fail_at("any",text,text,bigint,jsonb,boolean)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, '1', q{'{}'}, 'true' ], [ '55000', '55000', '55000', '55000', '55000', '55000' ] ],
	'idem_await_at("any",text,text,interval)' =>
	  [ '', [ '1', q{'s'}, q{'nk'}, q{'0'} ], [ '55000', '55000', '55000', '55000' ] ],
	'idem_token_issue_at("any",text,interval)' =>
	  [ '', [ '1', q{'s'}, q{'1 hour'} ], [ '55000', '55000', '55000' ] ],
	'idem_token_consume_at("any",text,text)' =>
	  [ '', [ '1', q{'s'}, q{'0123456789abcdef0123456789abcdef'} ], [ '55000', '55000', '55000' ] ],
	'idem_claim_many_at("any",text,text[],interval)' =>
	  [ '', [ '1', q{'s'}, q{ARRAY['a', 'b']}, q{'1 day'} ], [ '55000', '55000', '55000', '55000', '55000' ] ],
	# Without citus in the database: 55000 whatever the arguments.
	'idem_distribute(regtype,regclass,boolean)' =>
	  [ '', [ q{'bigint'}, q{'pg_class'}, 'true' ], [ '55000', '55000', '55000' ] ],
	# No arguments: nothing to pass NULL to.
	'idem_stats()'             => [ '', [], [] ],
	'idem_stats_reset()'       => [ '', [], [] ],
	'idem_summary()'           => [ '', [], [] ],
	'idem_health()'            => [ '', [], [] ],
	'idem_purge_worker()'      => [ '', [], [] ],
	'idem_cluster_stats()'     => [ '', [], [] ],
	'idem_machines_trigger()'  => [ '', [], [] ],
	'idem_guard_trigger()'     => [ '', [], [] ],);

my @functions = split /\n/, $node->safe_psql(
	'postgres', q{
	SELECT p.oid::regprocedure::text || '|' || coalesce(pg_catalog.array_to_string(
	           ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t), ','), '')
	FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	                AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idempotency'
	ORDER BY 1});
cmp_ok(scalar @functions, '>=', 20, 'the extension has its functions');

for my $line (@functions)
{
	my ($sig, $types) = split /\|/, $line, 2;
	(my $fname = $sig) =~ s/\(.*//;
	my @types = split /,/, $types // '';
	my $rule = $null_rules{$sig};
	ok($rule, "the NULL behaviour of $sig is stated in this test") or next;
	my ($setup, $args, $expect) = @$rule;
	is(scalar @$args, scalar @types, "$sig: one valid argument per parameter");
	for my $i (0 .. $#types)
	{
		my @a = @$args;
		$a[$i] = "NULL::$types[$i]";
		my $call = "SELECT $fname(" . join(', ', @a) . ')';
		# Set-returning functions: one value, the first column of the first row.
		$call = "SELECT count(*) FROM $fname(" . join(', ', @a) . ')'
		  if $fname =~ /^idem_(claim_many|begin)(_at)?$/;
		in_rollback(
			sub {
				run($setup) if $setup ne '';
				my ($k, $v) = run($call);
				my $want = $expect->[$i];
				if ($want =~ /^ok(?::(.*))?$/s)
				{
					my $out = $1;
					if (defined $out)
					{
						is("$k: $v", "OK: $out", "$sig with argument " . ($i + 1) . ' NULL');
					}
					else
					{
						is($k, 'OK', "$sig with argument " . ($i + 1) . " NULL succeeds")
						  or diag("got $k $v");
					}
				}
				else
				{
					is("$k: $v", "ERR: $want",
						"$sig with argument " . ($i + 1) . " NULL fails with $want");
				}
			});
	}
}
# Array elements: NULL is refused, at every position.
for my $arr (q{ARRAY[NULL]::text[]}, q{ARRAY[NULL, 'a']}, q{ARRAY['a', NULL]})
{
	fails("SELECT * FROM idem_claim_many('s', $arr)", '22004',
		"idem_claim_many with $arr fails with 22004");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM idem_records'),
	'0', 'no NULL argument left a record');

#--------------------------------------------------------------------------
# Keys and scopes at and beyond the limits, in bytes.
#--------------------------------------------------------------------------
my %at_limit = (
	ascii     => [ q{repeat('k', 1024)},                    q{repeat('s', 128)} ],
	two_byte  => [ q{repeat(U&'\00E9', 512)},               q{repeat(U&'\00E9', 64)} ],
	four_byte => [ q{repeat(U&'\+01F600', 256)},            q{repeat(U&'\+01F600', 32)} ],
	mixed     => [ q{repeat(U&'\00E9', 511) || 'kk'},       q{repeat(U&'\+01F600', 31) || 'ssss'} ],);
my %beyond = (
	ascii     => [ q{repeat('k', 1025)},                    q{repeat('s', 129)} ],
	two_byte  => [ q{repeat(U&'\00E9', 512) || 'k'},        q{repeat(U&'\00E9', 64) || 's'} ],
	four_byte => [ q{repeat(U&'\+01F600', 256) || 'k'},     q{repeat(U&'\+01F600', 32) || 's'} ],
	huge      => [ q{repeat('k', 10000000)},                q{repeat('s', 10000000)} ],);

# Every function taking a scope and a key, with the key and scope as %s.
my @keyed = (
	[ 'idem_claim',         q{SELECT idem_claim(%s, %s)},                         't' ],
	[ 'idem_lookup',        q{SELECT idem_lookup(%s, %s) IS NULL},                't' ],
	[ 'idem_release',       q{SELECT idem_release(%s, %s)},                       'f' ],
	[ 'idem_complete',      q{SELECT idem_complete(%s, %s, '1')},                 'ID002' ],
	[ 'idem_begin',         q{SELECT outcome FROM idem_begin(%s, %s)},            'acquired' ],
	[ 'idem_heartbeat',     q{SELECT idem_heartbeat(%s, %s, 1)},                  'ID002' ],
	[ 'idem_finish',        q{SELECT idem_finish(%s, %s, 1)},                     'ID002' ],
	[ 'idem_fail',          q{SELECT idem_fail(%s, %s, 1)},                       'ID002' ],
	[ 'idem_await',         q{SELECT idem_await(%s, %s, '0') IS NULL},            't' ],
	[ 'idem_claim_many',    q{SELECT claimed FROM idem_claim_many(%s, ARRAY[%s])}, 't' ],);

for my $kind (sort keys %at_limit)
{
	my ($key, $scope) = @{ $at_limit{$kind} };
	for my $f (@keyed)
	{
		my ($fname, $tpl, $want) = @$f;
		my $sql = sprintf($tpl, $scope, $key);
		in_rollback(
			sub {
				my ($k, $v) = run($sql);
				if ($want =~ /^[0-9A-Z]{5}$/)
				{
					is("$k: $v", "ERR: $want", "$fname: key and scope at the limit ($kind) are valid");
				}
				else
				{
					is("$k: $v", "OK: $want", "$fname: key and scope at the limit ($kind) are valid");
				}
			});
	}
	in_rollback(
		sub {
			gives("SELECT idem_token_issue($scope) ~ '^[0-9a-f]{32}\$'", 't',
				"idem_token_issue: scope at the limit ($kind)");
			gives("SELECT idem_token_consume($scope, '0123456789abcdef0123456789abcdef')", 'f',
				"idem_token_consume: scope at the limit ($kind)");
			gives("SELECT idem_claim($scope, $key)", 't', "claim at the limit ($kind)");
			gives("SELECT (idem_lookup($scope, $key)).key = $key", 't',
				"the key at the limit comes back intact ($kind)");
		});
}
for my $kind (sort keys %beyond)
{
	my ($key, $scope) = @{ $beyond{$kind} };
	for my $f (@keyed)
	{
		my ($fname, $tpl) = @$f;
		fails(sprintf($tpl, q{'s'}, $key), '22001', "$fname: key one byte too long ($kind)");
		fails(sprintf($tpl, $scope, q{'k'}), '22001', "$fname: scope one byte too long ($kind)");
	}
	fails("SELECT idem_token_issue($scope)", '22001', "idem_token_issue: scope too long ($kind)");
	fails("SELECT idem_token_consume($scope, '0123456789abcdef0123456789abcdef')", '22001',
		"idem_token_consume: scope too long ($kind)");
	fails("SELECT idem_claim($key)", '22001', "idem_claim(key): key too long ($kind)");
}
for my $f (@keyed)
{
	my ($fname, $tpl) = @$f;
	fails(sprintf($tpl, q{'s'}, q{''}), '22023', "$fname: the empty key is refused");
}
fails(q{SELECT idem_claim('')}, '22023', 'idem_claim(key): the empty key is refused');
is($node->safe_psql('postgres', 'SELECT count(*) FROM idem_records'),
	'0', 'no invalid key or scope left a record');

#--------------------------------------------------------------------------
# Binary-ish, multibyte and look-alike keys: distinct, stored exactly.
#--------------------------------------------------------------------------
my @odd = (
	q{(SELECT string_agg(chr(i), '') FROM generate_series(1, 127) AS i)},
	q{E'\x01\x02\x03\x1b[31m\x7f'},
	q{E'%s%n%x%p%%%d%08x'},
	q{E'back\\\\slash\\\\'},
	q{'quote''s and "double" quotes'},
	q{E'line\nbreak\r\n\ttab'},
	q{E'; DROP TABLE idem_records; --'},
	q{U&'\0000' || 'x'},    # rejected by PostgreSQL itself: no NUL in text
	q{U&'\FEFF\200B\200D\2028\2029'},
	q{U&'\+10FFFF\+01F4A9'},);
my @variants = (
	q{'key'}, q{'Key'}, q{'KEY'}, q{'key '}, q{' key'}, q{E'key\t'}, q{E'key\n'},
	q{U&'key\00A0'}, q{U&'key\3000'}, q{U&'key\200B'}, q{U&'\FF4B\FF45\FF59'},
	q{U&'caf\00E9'}, q{U&'cafe\0301'}, q{U&'\212B'}, q{U&'\00C5'}, q{U&'A\030A'},);

my $distinct = 0;
for my $key (@odd, @variants)
{
	my ($k, $v) = run("SELECT $key");
	if ($k eq 'ERR')
	{
		# Only the NUL character is refused, by PostgreSQL's own input.
		like($key, qr/\\0000/, "$key is refused by PostgreSQL, not by the extension ($v)");
		next;
	}
	$distinct++;
	gives("SELECT idem_claim('odd', $key)", 't', "claim of $key");
	gives("SELECT idem_claim('odd', $key)", 'f', "second claim of $key is a duplicate");
	gives("SELECT (idem_lookup('odd', $key)).key = $key", 't', "$key comes back byte for byte");
	gives("SELECT idem_claim('odd-fp', $key, NULL, 'one')", 't', "claim of $key with a fingerprint");
	fails("SELECT idem_claim('odd-fp', $key, NULL, 'two')", 'ID001',
		"a fingerprint mismatch on $key fails cleanly with ID001");
	gives("SELECT claimed FROM idem_claim_many('odd-batch', ARRAY[$key, $key])",
		"t\nf", "batch claim of $key");
	gives("SELECT outcome FROM idem_begin('odd-lease', $key)", 'acquired', "lease on $key");
	gives("SELECT idem_claim($key, 'k')", 't', "$key as a scope");
}
gives(q{SELECT count(*) FROM idem_records WHERE scope = 'odd'}, $distinct,
	'every odd key and variant is a distinct key');
# Error messages that quote such keys do not break: ID001 names the key.
run(q{SELECT idem_claim('fp', E'%s%n\x1b', NULL, 'one')});
fails(q{SELECT idem_claim('fp', E'%s%n\x1b', NULL, 'two')}, 'ID001',
	'a fingerprint mismatch on a key with format directives fails with ID001');
run('\set VERBOSITY verbose');
$s->{stderr} = '';
$s->query(q{SELECT idem_claim('fp', E'%s%n\x1b', NULL, 'two')});
like($s->{stderr}, qr/Key "%s%n\x1b" in scope "fp"/, 'the message quotes the key verbatim');
$s->{stderr} = '';
run('\set VERBOSITY sqlstate');

#--------------------------------------------------------------------------
# Huge values.
#--------------------------------------------------------------------------
run(q{CREATE TEMP TABLE big AS
	SELECT jsonb_build_object('blob', repeat('x', 5 * 1024 * 1024)) AS compressible,
	       (SELECT jsonb_agg(md5(i::text)) FROM generate_series(1, 200000) AS i) AS random_ish});
gives(q{SELECT octet_length(compressible::text) > 5000000, octet_length(random_ish::text) > 7000000 FROM big},
	"t|t", 'the huge values are several MB');
gives(q{SELECT idem_claim('big', 'complete')}, 't', 'claim of the key for a huge result');
gives(q{SELECT idem_complete('big', 'complete', (SELECT compressible FROM big))}, '',
	'idem_complete stores a 5 MB result');
gives(q{SELECT token AS tok FROM idem_begin('big', 'finish') \gset
	SELECT idem_finish('big', 'finish', :tok, (SELECT random_ish FROM big))}, '',
	'idem_finish stores a 7 MB result');
gives(q{SELECT token AS tok FROM idem_begin('big', 'fail') \gset
	SELECT idem_fail('big', 'fail', :tok, (SELECT random_ish FROM big), false)}, '',
	'idem_fail stores a 7 MB error');
gives(q{SELECT (SELECT md5((idem_lookup('big', 'complete')).result::text)) = md5(compressible::text),
	       (SELECT md5((idem_lookup('big', 'finish')).result::text)) = md5(random_ish::text),
	       (SELECT md5(result::text) FROM idem_begin('big', 'fail')) = md5(random_ish::text),
	       (SELECT md5(r.result::text) FROM idem_await('big', 'finish', '0') r) = md5(random_ish::text)
	FROM big}, 't|t|t|t', 'the huge results come back intact (lookup, begin replay, await)');
gives(q{SELECT bool_and(pg_column_size(result) < octet_length(result::text))
	FROM idem_records WHERE scope = 'big' AND key = 'complete'}, 't',
	'the compressible result is stored compressed');
gives(q{SELECT count(*) FROM verify_heapam('idem_records', check_toast => true)}, '0',
	'the table and its TOAST pass verify_heapam');
gives(q{SELECT idem_claim('big', 'fp', NULL, repeat('f', 20000000))}, 't',
	'a claim with a 20 MB fingerprint');
gives(q{SELECT octet_length(fingerprint), encode(fingerprint, 'hex') = encode(sha256(repeat('f', 20000000)::bytea), 'hex')
	FROM idem_records WHERE scope = 'big' AND key = 'fp'}, '32|t',
	'only the 32-byte SHA-256 of a 20 MB fingerprint is stored');
gives(q{SELECT count(*) FILTER (WHERE claimed), count(*)
	FROM idem_claim_many('big-batch', ARRAY(SELECT 'k' || i FROM generate_series(1, 50000) AS i))},
	'50000|50000', 'a batch of 50000 keys');
gives(q{SELECT count(*) FILTER (WHERE claimed), count(*)
	FROM idem_claim_many('big-batch', ARRAY(SELECT 'k' || (i % 3) FROM generate_series(1, 100000) AS i))},
	'1|100000', 'a batch of 100000 elements over three keys, two already claimed: one claimed');
gives(q{SELECT count(*) FROM idem_claim_many('big-batch', '{}'::text[])}, '0',
	'an empty batch claims nothing');
gives(q{SELECT string_agg(m.key || '=' || m.claimed, ',' ORDER BY m.n)
	FROM idem_claim_many('big-batch', '[5:7]={x1,x2,x1}'::text[]) WITH ORDINALITY AS m(key, claimed, n)},
	'x1=true,x2=true,x1=false', 'a batch array with another lower bound');
fails(q{SELECT * FROM idem_claim_many('big-batch', '{{a,b},{c,d}}'::text[])}, '22023',
	'a two-dimensional batch array is refused');
fails(q{SELECT * FROM idem_claim_many('big-batch', ARRAY['ok', repeat('k', 1025)])}, '22001',
	'a batch element too long is refused');
fails(q{SELECT * FROM idem_claim_many('big-batch', ARRAY['fresh-1', ''])}, '22023',
	'an empty batch element is refused');
gives(q{SELECT count(*) FROM idem_records WHERE key = 'fresh-1'}, '0',
	'a refused batch claims none of its keys');

#--------------------------------------------------------------------------
# State machines: huge, odd and malformed definitions.
#--------------------------------------------------------------------------
gives(q{SELECT idem_machine_define('chain', jsonb_build_object(
	    'initial', jsonb_build_array('s0'),
	    'transitions', (SELECT jsonb_object_agg('s' || i, jsonb_build_array('s' || (i + 1)))
	                    FROM generate_series(0, 4998) AS i)))}, '',
	'a chain of 5000 states is accepted');
gives(q{SELECT idem_can_transition('chain', 's0', 's1'), idem_can_transition('chain', 's4998', 's4999'),
	       idem_can_transition('chain', 's0', 's2'), idem_transition('chain', 's2500', 's2501')},
	't|t|f|s2501', 'the 5000-state chain answers correctly');
gives(q{SELECT idem_machine_define('dense', jsonb_build_object(
	    'initial', jsonb_build_array('d0'),
	    'transitions', (SELECT jsonb_object_agg('d' || i,
	        (SELECT jsonb_agg('d' || j) FROM generate_series(0, 199) AS j))
	                    FROM generate_series(0, 199) AS i)))}, '',
	'a complete graph of 200 states (40000 transitions) is accepted');
gives(q{SELECT idem_can_transition('dense', 'd199', 'd0') AND idem_can_transition('dense', 'd7', 'd7')},
	't', 'the dense machine answers correctly');
my $long_state = q{repeat('L', 100000)};
gives(qq{SELECT idem_machine_define('long', jsonb_build_object('initial', jsonb_build_array($long_state),
	    'transitions', jsonb_build_object($long_state, jsonb_build_array('b'))))}, '',
	'a state name of 100 KB is accepted');
gives(qq{SELECT idem_can_transition('long', $long_state, 'b'), idem_can_transition('long', 'b', $long_state)},
	't|f', 'the long state name is matched exactly');
fails(qq{SELECT idem_transition('long', 'b', $long_state)}, 'ID004',
	'an illegal transition to the long state fails cleanly');
gives(q{SELECT idem_machine_define(E'q''u"o\\\\te%s', jsonb_build_object(
	    'initial', jsonb_build_array(E'%s\n"', U&'\00E9'),
	    'transitions', jsonb_build_object(E'%s\n"', jsonb_build_array(U&'e\0301'))))}, '',
	'odd machine and state names are accepted');
gives(q{SELECT idem_can_transition(E'q''u"o\\\\te%s', E'%s\n"', U&'e\0301'),
	       idem_can_transition(E'q''u"o\\\\te%s', E'%s\n"', U&'\00E9')}, 't|f',
	'odd state names are distinct byte strings');
fails(q{SELECT idem_transition(E'q''u"o\\\\te%s', U&'e\0301', E'%s\n"')}, 'ID004',
	'an illegal transition between odd states fails cleanly');

my @malformed = (
	'[]', '"machine"', '42', 'true', 'null', '{}',
	'{"initial": ["a"]}',
	'{"transitions": {}}',
	'{"initial": ["a"], "transitions": {}, "final": []}',
	'{"initial": "a", "transitions": {}}',
	'{"initial": {"a": 1}, "transitions": {}}',
	'{"initial": [], "transitions": {}}',
	'{"initial": ["a", 1], "transitions": {}}',
	'{"initial": ["a", null], "transitions": {}}',
	'{"initial": [["a"]], "transitions": {}}',
	'{"initial": [""], "transitions": {}}',
	'{"initial": ["a", "a"], "transitions": {}}',
	'{"initial": ["a"], "transitions": []}',
	'{"initial": ["a"], "transitions": "a"}',
	'{"initial": ["a"], "transitions": {"a": "b"}}',
	'{"initial": ["a"], "transitions": {"a": null}}',
	'{"initial": ["a"], "transitions": {"a": {"b": true}}}',
	'{"initial": ["a"], "transitions": {"a": ["b", false]}}',
	'{"initial": ["a"], "transitions": {"a": [""]}}',
	'{"initial": ["a"], "transitions": {"": ["a"]}}',
	'{"initial": ["a"], "transitions": {"a": ["b", "b"]}}',
	'{"initial": ["a"], "transitions": {"b": ["a"]}}',
	'{"initial": ["a"], "transitions": {"a": ["b"], "c": ["d"]}}',);
for my $def (@malformed)
{
	(my $l = $def) =~ s/'/''/g;
	fails("SELECT idem_machine_define('bad', '$l')", '22023', "malformed definition $def");
}
fails(q{SELECT idem_machine_define('bad', ('{"initial": ' || repeat('[', 1000) || '"a"' || repeat(']', 1000) || ', "transitions": {}}')::jsonb)},
	'22023', 'a deeply nested definition is refused');
fails(q{INSERT INTO idem_machines (machine, definition) VALUES ('bad', '{"initial": []}')}, '22023',
	'a malformed definition written directly is refused too');
gives(q{SELECT count(*) FROM idem_machines WHERE machine = 'bad'}, '0', 'no malformed definition was stored');
gives(q{SELECT idem_machine_define(repeat('m', 63), '{"initial": ["a"], "transitions": {}}')},
	'', 'a machine name of 63 bytes is accepted');
gives(q{SELECT idem_machine_define(repeat(U&'\00E9', 31) || 'm', '{"initial": ["a"], "transitions": {}}')},
	'', 'a machine name of 31 two-byte characters and one more byte is accepted');
fails(q{SELECT idem_machine_define(repeat('m', 64), '{"initial": ["a"], "transitions": {}}')}, '22001',
	'a machine name of 64 bytes is refused');
fails(q{SELECT idem_machine_define(repeat(U&'\00E9', 32), '{"initial": ["a"], "transitions": {}}')}, '22001',
	'a machine name of 32 two-byte characters is refused');
fails(q{SELECT idem_machine_define('', '{"initial": ["a"], "transitions": {}}')}, '22023',
	'the empty machine name is refused');
for my $f ('idem_can_transition', 'idem_transition', 'idem_guard_allows')
{
	fails("SELECT $f(repeat('m', 64), 'a', 'b')", '22001', "$f: machine name too long");
	fails("SELECT $f('', 'a', 'b')", '22023', "$f: empty machine name");
	fails("SELECT $f('no such machine', 'a', 'b')", '42704', "$f: unknown machine");
}
fails(q{SELECT idem_can_transition('chain', 'nope', 's1')}, '22023', 'a value that is not a state');

#--------------------------------------------------------------------------
# Intervals: zero, negative, infinite, overflowing.
#--------------------------------------------------------------------------
my @bad_intervals = (q{'0'}, q{'-1 microsecond'}, q{'-1 day'}, q{'1 month -40 days'},
	q{'178000000 years'}, q{'-178000000 years'}, q{'2147483647 days'}, q{'-2147483648 days'},
	q{'2147483647 months'});
my @interval_args = (
	[ 'idem_claim ttl',       q{SELECT idem_claim('iv', 'k', %s)} ],
	[ 'idem_begin lease',     q{SELECT outcome FROM idem_begin('iv', 'k', lease => %s)} ],
	[ 'idem_begin ttl',       q{SELECT outcome FROM idem_begin('iv', 'k', ttl => %s)} ],
	[ 'idem_claim_many ttl',  q{SELECT * FROM idem_claim_many('iv', ARRAY['k'], %s)} ],
	[ 'idem_token_issue ttl', q{SELECT idem_token_issue('iv', %s)} ],);
for my $iv (@bad_intervals)
{
	for my $a (@interval_args)
	{
		my ($what, $tpl) = @$a;
		fails(sprintf($tpl, "${iv}::interval"), '22023', "$what $iv is refused");
	}
	run(q{SELECT token AS tok FROM idem_begin('iv', 'hb', lease => '1 hour') \gset});
	fails("SELECT idem_heartbeat('iv', 'hb', :tok, ${iv}::interval)", '22023',
		"idem_heartbeat lease $iv is refused");
	run(q{SELECT idem_finish('iv', 'hb', :tok)});
	run(q{SELECT idem_release('iv', 'hb')});
}
fails(q{SELECT idem_await('iv', 'k', '-1 microsecond')}, '22023', 'idem_await: a negative timeout is refused');
fails(q{SELECT idem_await('iv', 'k', '178000000 years')}, '22023', 'idem_await: an overflowing timeout is refused');
gives(q{SELECT idem_await('iv', 'k', '0') IS NULL}, 't', 'idem_await: a zero timeout looks once');
gives(q{SELECT idem_claim('iv', 'tiny', '1 microsecond')}, 't', 'a ttl of one microsecond is valid');
run(q{SELECT pg_sleep(0.002)});
gives(q{SELECT idem_claim('iv', 'tiny', '1 microsecond')}, 't', '... and the key has expired a moment later');
gives(q{SELECT idem_claim('iv', 'mixed', '1 day -1 hour')}, 't', 'a positive ttl with a negative part is valid');
if ($pg_version >= 170000)
{
	gives(q{SELECT idem_claim('iv', 'forever', 'infinity')}, 't', 'ttl infinity is valid (PostgreSQL 17)');
	gives(q{SELECT (idem_lookup('iv', 'forever')).expires_at = 'infinity'},
		't', 'ttl infinity keeps the key forever (PostgreSQL 17)');
	fails(q{SELECT idem_claim('iv', 'k', '-infinity')}, '22023', 'ttl -infinity is refused (PostgreSQL 17)');
}
else
{
	fails(q{SELECT idem_claim('iv', 'k', 'infinity')}, '22007',
		'before PostgreSQL 17 an infinite interval cannot even be written');
}
gives(q{SELECT count(*) FROM idem_records WHERE scope = 'iv' AND key = 'k'}, '0',
	'no refused interval left a record');
for my $n ('0', '-1', '-2147483648')
{
	fails("SELECT idem_purge($n)", '22023', "idem_purge($n) is refused");
}
gives(q{SELECT idem_purge(2147483647) >= 0}, 't', 'idem_purge(2147483647) is fine');
fails(q{SET idempotency.max_attempts = -1}, '22023', 'max_attempts below 0 is refused');
fails(q{SET idempotency.default_ttl = '-1 day'}, '22023', 'a negative default_ttl is refused');
run(q{SET idempotency.default_ttl = '178000000 years'});
fails(q{SELECT idem_claim('iv', 'default-overflow')}, '22023',
	'a default_ttl that overflows fails the claim with 22023');
run(q{RESET idempotency.default_ttl});

#--------------------------------------------------------------------------
# One-time tokens: only the exact shape is accepted.
#--------------------------------------------------------------------------
for my $t (
	q{'0123456789ABCDEF0123456789ABCDEF'}, q{'0123456789abcdef0123456789abcde'},
	q{'0123456789abcdef0123456789abcdef0'}, q{''}, q{repeat('g', 32)},
	q{repeat(U&'\00E9', 16)}, q{' 123456789abcdef0123456789abcdef'},
	q{'0123456789abcdef0123456789abcde' || chr(10)}, q{repeat('a', 10000000)})
{
	fails("SELECT idem_token_consume('tok', $t)", '22023', "malformed token $t");
}
gives(q{SELECT idem_token_consume('tok', '0123456789abcdef0123456789abcdef')}, 'f',
	'an unknown well-formed token is simply not valid');

#--------------------------------------------------------------------------
# Nothing crashed.
#--------------------------------------------------------------------------
$s->quit;
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$started, 'the server never restarted');
unlike(slurp_file($node->logfile), qr/terminated by signal|PANIC|TRAP:|was terminated/,
	'the server log shows no crash');
$node->stop;
done_testing();
