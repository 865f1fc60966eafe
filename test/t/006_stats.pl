# idem_stats with the library preloaded: the counters per
# database and scope, the counting rules (effects only for transactions
# that commit, savepoints included; observations always; PREPARE counts),
# per-database separation and visibility, idem_stats_reset and its
# privilege, agreement with the table under concurrent clients, and the
# bounded table overflowing into one '*' row.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('stats');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'idempotency'
idempotency.stats_max_scopes = 6
max_prepared_transactions = 5
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION idempotency');

# The counters of (current database, scope) as "claimed duplicates
# in_progress_conflicts fingerprint_mismatches takeovers completed failed
# purged", or '' when there is no row.
sub counters
{
	my ($db, $scope) = @_;
	return $node->safe_psql(
		$db, qq{
		SELECT concat_ws(' ', claimed, duplicates, in_progress_conflicts,
		                 fingerprint_mismatches, takeovers, completed, failed, purged)
		  FROM idem_stats
		 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		   AND scope = '$scope'});
}

is( $node->safe_psql('postgres', 'SELECT count(*) FROM idem_stats'),
	'0', 'no rows before anything happened');

# Claims and duplicates, each statement in its own transaction.
$node->safe_psql(
	'postgres', q{
	SELECT idem_claim('pay', 'k1');
	SELECT idem_claim('pay', 'k2');
	SELECT idem_claim('pay', 'k1');
});
is(counters('postgres', 'pay'), '2 1 0 0 0 0 0 0', 'two claims, one duplicate');

# A rolled-back claim is not a claim; a duplicate answered in a
# transaction that rolls back is still a duplicate.
$node->safe_psql(
	'postgres', q{
	BEGIN; SELECT idem_claim('pay', 'k3'); ROLLBACK;
	BEGIN; SELECT idem_claim('pay', 'k1'); ROLLBACK;
});
is(counters('postgres', 'pay'),
	'2 2 0 0 0 0 0 0',
	'rolled-back claim not counted, rolled-back duplicate counted');

# Savepoints: a claim in a rolled-back savepoint is not counted, claims in
# released savepoints are, at any depth; so is nothing inside a PL/pgSQL
# exception block that caught an error.
$node->safe_psql(
	'postgres', q{
	BEGIN;
	SAVEPOINT a; SELECT idem_claim('pay', 'k4'); ROLLBACK TO a;
	SELECT idem_claim('pay', 'k5');
	SAVEPOINT b; SELECT idem_claim('pay', 'k6');
	SAVEPOINT c; SELECT idem_claim('pay', 'k7');
	RELEASE b;
	COMMIT;
	BEGIN;
	SAVEPOINT a; SAVEPOINT b; SELECT idem_claim('pay', 'k8'); RELEASE b;
	ROLLBACK TO a;
	SELECT idem_claim('pay', 'k8');
	COMMIT;
	DO $$
	BEGIN
	    BEGIN
	        PERFORM idem_claim('pay', 'k9');
	        RAISE EXCEPTION 'undo';
	    EXCEPTION WHEN raise_exception THEN NULL;
	    END;
	END $$;
	SELECT idem_claim('pay', 'k9');
});
is(counters('postgres', 'pay'),
	'7 2 0 0 0 0 0 0', 'savepoints: only claims that committed count');

# A fingerprint mismatch aborts the caller's transaction but is counted.
$node->safe_psql('postgres', "SELECT idem_claim('pay', 'f1', NULL, 'request a')");
my ($ret, $out, $err) =
  $node->psql('postgres', "SELECT idem_claim('pay', 'f1', NULL, 'request b')");
like($err, qr/reused with a different request/, 'fingerprint mismatch raised');
is(counters('postgres', 'pay'), '8 2 0 1 0 0 0 0', 'mismatch counted');

# The counters agree with the table: every counted claim is a record.
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM idem_records WHERE scope = 'pay'"),
	'8',
	'claimed equals the records written');

# Leases: acquired, in progress, completed, failed, takeovers of retryable
# records by idem_begin and by idem_claim.
$node->safe_psql(
	'postgres', q{
	SELECT outcome FROM idem_begin('job', 'j1');
	SELECT outcome FROM idem_begin('job', 'j1');
	SELECT idem_claim('job', 'j1');
	SELECT idem_finish('job', 'j1', (SELECT token FROM idem_records WHERE key = 'j1'));
	SELECT outcome FROM idem_begin('job', 'j1');

	SELECT outcome FROM idem_begin('job', 'j2');
	SELECT idem_fail('job', 'j2', (SELECT token FROM idem_records WHERE key = 'j2'));
	SELECT outcome FROM idem_begin('job', 'j2');
	SELECT idem_fail('job', 'j2', (SELECT token FROM idem_records WHERE key = 'j2'),
	                 retryable => false);
	SELECT idem_claim('job', 'j2');

	SELECT outcome FROM idem_begin('job', 'j3');
	SELECT idem_fail('job', 'j3', (SELECT token FROM idem_records WHERE key = 'j3'));
	SELECT idem_claim('job', 'j3');

	BEGIN;
	SELECT idem_claim('job', 'c1');
	SELECT idem_complete('job', 'c1', '{"ok": true}');
	COMMIT;
});
is(counters('postgres', 'job'),
	'6 2 2 0 2 2 3 0',
	'leases: acquired, conflicts, duplicates, takeovers, completed, failed');

# Purge: counted per scope of the rows removed, and only when committed.
$node->safe_psql(
	'postgres', q{
	SELECT idem_claim('pay', 'e' || i, '1 millisecond') FROM generate_series(1, 3) i;
});
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 0 FROM idem_records WHERE expires_at > clock_timestamp() AND key LIKE 'e_'}),
	'short-lived records expired');
$node->safe_psql(
	'postgres', q{
	BEGIN; SELECT idem_purge(); ROLLBACK;
});
is(counters('postgres', 'pay'), '11 2 0 1 0 0 0 0', 'rolled-back purge not counted');
is($node->safe_psql('postgres', 'SELECT idem_purge()'), '3', 'purge removed 3');
is(counters('postgres', 'pay'), '11 2 0 1 0 0 0 3', 'purge counted');

# PREPARE TRANSACTION counts at prepare time, once, whatever follows.
$node->safe_psql(
	'postgres', q{
	BEGIN; SELECT idem_claim('pay', 'p1'); PREPARE TRANSACTION 'p1';
});
is(counters('postgres', 'pay'), '12 2 0 1 0 0 0 3', 'counted at PREPARE');
$node->safe_psql('postgres', "COMMIT PREPARED 'p1'");
$node->safe_psql(
	'postgres', q{
	BEGIN; SELECT idem_claim('pay', 'p2'); PREPARE TRANSACTION 'p2';
	ROLLBACK PREPARED 'p2';
});
is(counters('postgres', 'pay'),
	'13 2 0 1 0 0 0 3',
	'COMMIT PREPARED adds nothing; ROLLBACK PREPARED takes nothing back');

# Per database: the same scope in another database is another row.
$node->safe_psql(
	'other', q{
	SELECT idem_claim('pay', 'k1');
	SELECT idem_claim('pay', 'k1');
});
is(counters('other', 'pay'),    '1 1 0 0 0 0 0 0',  'other database counted apart');
is(counters('postgres', 'pay'), '13 2 0 1 0 0 0 3', 'first database unchanged');

# Visibility: pg_monitor sees every database; a role granted the view sees
# its own database only; a role without a grant sees nothing.
$node->safe_psql(
	'postgres', q{
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
	CREATE ROLE app LOGIN;
	CREATE ROLE resetter LOGIN;
});
$node->safe_psql(
	'other', q{
	GRANT SELECT ON idem_stats TO app;
	GRANT EXECUTE ON FUNCTION idem_stats() TO app;
});
is( $node->safe_psql(
		'other',
		q{SELECT string_agg(datname || ':' || scope, ' ' ORDER BY datname, scope) FROM idem_stats},
		extra_params => [ '-U', 'watcher' ]),
	'other:pay postgres:job postgres:pay',
	'pg_monitor sees every database');
is( $node->safe_psql(
		'other',
		q{SELECT string_agg(datname || ':' || scope, ' ' ORDER BY datname, scope) FROM idem_stats},
		extra_params => [ '-U', 'app' ]),
	'other:pay',
	'a granted role sees its own database');
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM idem_stats',
	extra_params => [ '-U', 'app' ]);
like($err, qr/permission denied for view idem_stats/, 'without a grant: denied');

# Reset: superuser or granted only; forgets every database.
($ret, $out, $err) = $node->psql('postgres', 'SELECT idem_stats_reset()',
	extra_params => [ '-U', 'resetter' ]);
like($err, qr/permission denied for function idem_stats_reset/,
	'reset needs a grant');
is(counters('postgres', 'pay'), '13 2 0 1 0 0 0 3', 'a refused reset changes nothing');
my $before = $node->safe_psql('postgres',
	'SELECT max(stats_reset) FROM idem_stats');
$node->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION idem_stats_reset() TO resetter');
$node->safe_psql('postgres', 'SELECT idem_stats_reset()',
	extra_params => [ '-U', 'resetter' ]);
is($node->safe_psql('postgres', 'SELECT count(*) FROM idem_stats'),
	'0', 'reset forgets every row of every database');
$node->safe_psql('postgres', "SELECT idem_claim('pay', 'after-reset')");
is(counters('postgres', 'pay'), '1 0 0 0 0 0 0 0', 'counting starts again');
is( $node->safe_psql(
		'postgres',
		"SELECT stats_reset > '$before' FROM idem_stats WHERE scope = 'pay'"),
	't',
	'stats_reset moved forward');

# Under concurrency (pgbench, 8 clients on overlapping keys): the counters
# agree with the table, and every call is counted once.  With one
# transaction in four rolled back, claimed still equals the records.
my $script = <<'EOS';
\set k random(1, 400)
\set fail random(1, 4)
BEGIN;
SELECT idem_claim('SCOPE', 'k' || :k);
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
EOS
for my $case ([ 'bench1', 'COMMIT' ], [ 'bench2', 'ROLLBACK' ])
{
	my ($scope, $mode) = @$case;
	my $body = $script;
	$body =~ s/SCOPE/$scope/g;
	$body =~ s/\\set fail random\(1, 4\)/\\set fail 0/ if $mode eq 'COMMIT';
	$node->pgbench(
		'-n -c 8 -j 2 -t 200',
		0,
		[qr{number of transactions actually processed: 1600/1600}],
		[qr{^$}],
		"pgbench claims in $scope",
		{ "stats_$scope" => $body });
	is( $node->safe_psql(
			'postgres', qq{
		SELECT s.claimed = (SELECT count(*) FROM idem_records WHERE scope = '$scope')
		  FROM idem_stats s WHERE s.datname = 'postgres' AND s.scope = '$scope'}),
		't',
		"$scope: claimed equals the records written");
}
is( $node->safe_psql(
		'postgres',
		"SELECT claimed + duplicates FROM idem_stats WHERE scope = 'bench1'"),
	'1600',
	'bench1: every call counted once');
cmp_ok(
	$node->safe_psql(
		'postgres',
		"SELECT claimed + duplicates FROM idem_stats WHERE scope = 'bench2'"),
	'<', 1600,
	'bench2: rolled-back claims not counted');

# Takeovers of leases: because the bound owner's session was gone
# (owner_gone_takeovers), and after the owner marked its outside effect
# started (unknown_takeovers), each logged with
# idempotency.log_duplicates.  The owner marks, then is terminated: the
# next idem_begin takes over at once, told unknown.  A marked lease that
# ran out taken over by idem_claim (what idem_http_begin's reconcile does)
# is unknown too; an unmarked one that ran out is a plain takeover.
$node->safe_psql('postgres', 'SELECT idem_stats_reset()');
$node->safe_psql('postgres', 'ALTER SYSTEM SET idempotency.log_duplicates = on');
$node->reload;
{
	my $owner = $node->background_psql('postgres');
	my $pid = $owner->query_safe(q{
		SELECT idem_effect_started('lease', 'gone', token) IS NOT NULL
		  FROM idem_begin('lease', 'gone', lease => '5 minutes', bind_to_session => true);
		SELECT pg_backend_pid()});
	$pid =~ s/.*\n//s;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid did not go";
	eval { $owner->quit };
}
my $log_offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		"SELECT concat_ws(':', outcome, attempt, effect_unknown) FROM idem_begin('lease', 'gone', lease => '5 minutes')"),
	'acquired:2:t',
	'the terminated owner had marked: taken over at once, told unknown');
$node->safe_psql(
	'postgres', q{
	SELECT idem_effect_started('lease', 'timed', token) IS NOT NULL
	  FROM idem_begin('lease', 'timed', lease => '1 millisecond');
	SELECT outcome FROM idem_begin('lease', 'plain', lease => '1 millisecond');
	SELECT pg_sleep(0.01);
	SELECT idem_claim('lease', 'timed');
	SELECT idem_claim('lease', 'plain');
});
is( $node->safe_psql(
		'postgres',
		"SELECT concat_ws(' ', takeovers, owner_gone_takeovers, unknown_takeovers) FROM idem_stats WHERE scope = 'lease'"),
	'3 1 2',
	'takeovers: 3, of them 1 from a gone owner, 2 told unknown');
is( $node->safe_psql('postgres',
		"SELECT effect_unknown_attempt FROM idem_records WHERE key = 'timed'"),
	'1', 'idem_claim records the unknown attempt');
ok( $node->log_contains(
		qr/idem_begin took over key "gone" in scope "lease" from an owner session that is gone; the outside effect of an earlier attempt is unknown/,
		$log_offset),
	'the owner-gone takeover is logged');
ok($node->log_contains(qr/idem_claim took over key "timed" in scope "lease"; the outside effect/, $log_offset),
	'the unknown takeover by idem_claim is logged');
ok(!$node->log_contains(qr/took over key "plain"/, $log_offset),
	'a plain takeover by time is not');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET idempotency.log_duplicates');
$node->reload;

# Bounded: stats_max_scopes = 6 pairs; the 7th and later pairs are counted
# in one row with scope '*' and no database.
$node->safe_psql('postgres', 'SELECT idem_stats_reset()');
is( $node->safe_psql('postgres', "SELECT count(*) FROM idem_stats WHERE scope = '*'"),
	'0', 'the overflow row is hidden while empty');
$node->safe_psql('postgres',
	join('', map { "SELECT idem_claim('o$_', 'k');\n" } 1 .. 9));
is($node->safe_psql('postgres', "SELECT count(*) FROM idem_stats WHERE scope <> '*'"),
	'6', 'six pairs tracked');
is( $node->safe_psql(
		'postgres',
		"SELECT coalesce(datname, 'none') || ' ' || dbid || ' ' || claimed FROM idem_stats WHERE scope = '*'"
	),
	'none 0 3',
	'three more pairs counted in the overflow row');
$node->safe_psql('other', "SELECT idem_claim('o1', 'k')");
is( $node->safe_psql('postgres',
		"SELECT claimed FROM idem_stats WHERE scope = '*'"),
	'4', 'a full table sends pairs of any database to the overflow row');
is( $node->safe_psql('postgres',
		"SELECT sum(claimed) FROM idem_stats"),
	'10', 'nothing lost');

$node->stop;
done_testing();
