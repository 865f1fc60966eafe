# The background purge.  With the library preloaded and
# idempotency.purge_databases = 'postgres, noext, nodb':
# - expired records in postgres disappear by themselves, in batches, while
#   claims of other keys go on (none blocked: each runs under lock_timeout),
#   and the LOG lines account for every record removed;
# - noext (no extension) gets exactly one WARNING, nodb (no such database)
#   exactly one, however many rounds pass; both are picked up once they
#   change;
# - a round that fails is retried at the next naptime, without restarting
#   the server, and purging resumes once the cause is gone;
# - idem_stats counts what the worker purged;
# - the outbox: each round also runs idem_outbox_purge, which
#   removes the messages past their topic's retention that every group
#   acknowledged, keeps every message a lagging group has not acknowledged
#   (however old), keeps acknowledged ones within the retention, and drops
#   those of a topic nobody reads once past it; the LOG lines account for
#   every message removed; a database whose extension has no outbox (0.4.0)
#   is purged of records without a word about the outbox.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('purge');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
$node->stop;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'idempotency'
idempotency.purge_databases = 'postgres, noext, nodb'
idempotency.purge_naptime = 1s
idempotency.purge_batch_size = 500
idempotency.purge_delay = 50ms
});
$node->start;

# Poll the server log until $check->(log text) holds.
sub wait_for_log
{
	my ($check, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $check->(slurp_file($node->logfile));
		usleep(200_000);
	}
	diag("timed out waiting for $what");
	return 0;
}

# Sum of the records and transactions reported removed in database $db.
sub removed
{
	my ($log, $db) = @_;
	my ($records, $xacts) = (0, 0);
	while ($log =~
		/LOG:  idempotency purge: removed (\d+) expired records in database "$db" \((\d+) transactions?\)/g
	  )
	{
		$records += $1;
		$xacts   += $2;
	}
	return ($records, $xacts);
}

sub count_matches
{
	my ($log, $re) = @_;
	my @all = ($log =~ /$re/g);
	return scalar @all;
}

ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'idempotency purge launcher'}),
	'the launcher runs');
my $launcher_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency purge launcher'});

# 3000 records that expire in a second, in one transaction.
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FILTER (WHERE idem_claim('exp', 'k' || i, '1 second'))
	  FROM generate_series(1, 3000) i}),
	'3000',
	'3000 short-lived records claimed');

# Keep claiming new keys until the expired records are gone.
my $claims  = 0;
my $failed  = 0;
my $left    = -1;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	my $got = $node->safe_psql(
		'postgres', qq{
		SET lock_timeout = '30s';
		SELECT count(*) FILTER (WHERE NOT idem_claim('live', 'k' || i))
		  FROM generate_series($claims + 1, $claims + 20) i});
	$failed += $got;
	$claims += 20;
	$left = $node->safe_psql('postgres',
		"SELECT count(*) FROM idem_records WHERE scope = 'exp'");
	last if $left == 0;
}
is($left,   0, 'the expired records were purged');
is($failed, 0, "all $claims claims made meanwhile succeeded");
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM idem_records WHERE scope = 'live'"),
	$claims,
	'no live record was purged');

ok( wait_for_log(sub { (removed($_[0], 'postgres'))[0] == 3000 },
		'LOG lines for 3000 records'),
	'the LOG lines account for the 3000 records removed');
my (undef, $xacts) = removed(slurp_file($node->logfile), 'postgres');
cmp_ok($xacts, '>=', 6, 'in batches of 500, one transaction each');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(scope || ':' || claimed || ':' || purged, ' ' ORDER BY scope)
	  FROM idem_stats WHERE datname = 'postgres'}),
	"exp:3000:3000 live:$claims:0",
	'idem_stats counts the claims and the purges of the worker');

# Rounds keep running in noext (each commits one transaction there, to
# find no extension); after several, still exactly one warning each for
# noext and nodb (the launcher looks at nodb before every round).
my $noext_xacts = $node->safe_psql('postgres',
	"SELECT coalesce(max(xact_commit), 0) FROM pg_stat_database WHERE datname = 'noext'");
ok( $node->poll_query_until(
		'postgres', qq{
	SELECT xact_commit >= $noext_xacts + 5 FROM pg_stat_database WHERE datname = 'noext'}),
	'rounds go on in the database without the extension');
my $log = slurp_file($node->logfile);
is( count_matches(
		$log,
		qr/WARNING:  idempotency purge: extension "idempotency" is not installed in database "noext"/
	),
	1,
	'one warning for the database without the extension');
is( count_matches(
		$log, qr/WARNING:  idempotency purge: database "nodb" does not exist/),
	1,
	'one warning for the missing database');
unlike($log, qr/FATAL/, 'no round failed');

# Both are picked up once they change.
$node->safe_psql('noext', 'CREATE EXTENSION idempotency');
$node->safe_psql(
	'noext', q{
	INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 's', 'k' || i, 'completed', now() - interval '2 days', now() - interval '2 days',
	       now() - interval '1 day'
	  FROM generate_series(1, 10) i});
ok( wait_for_log(sub { (removed($_[0], 'noext'))[0] == 10 },
		'purge in noext'),
	'noext is purged once the extension exists');
$node->safe_psql('postgres', 'CREATE DATABASE nodb');
ok( wait_for_log(
		sub {
			$_[0] =~
			  /WARNING:  idempotency purge: extension "idempotency" is not installed in database "nodb"/;
		},
		'round in nodb'),
	'nodb gets rounds once it exists');

# A failing round: the error is logged, the next round comes one naptime
# later, the server is not restarted, and purging resumes afterwards.
$node->safe_psql(
	'postgres', q{
	CREATE FUNCTION block_purge() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN RAISE EXCEPTION 'purge blocked by the test'; END $$;
	CREATE TRIGGER block_purge BEFORE DELETE ON idem_records
	    FOR EACH ROW EXECUTE FUNCTION block_purge();
	INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 'blocked', 'k' || i, 'completed', now() - interval '2 days',
	       now() - interval '2 days', now() - interval '1 day'
	  FROM generate_series(1, 5) i;
});
ok( wait_for_log(
		sub { count_matches($_[0], qr/ERROR:  purge blocked by the test/) >= 2 },
		'two failed rounds'),
	'a failed round is retried');
is( $node->safe_psql(
		'postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency purge launcher'}),
	$launcher_pid,
	'the server was not restarted (same launcher)');
$node->safe_psql('postgres',
	'DROP TRIGGER block_purge ON idem_records; DROP FUNCTION block_purge()');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM idem_records WHERE scope = 'blocked'"),
	'purging resumes');

# --- the outbox -----------------------------------------------------------------

# Sum of the outbox messages reported removed in database $db.
sub removed_messages
{
	my ($log, $db) = @_;
	my $n = 0;
	$n += $1
	  while $log =~
	  /LOG:  idempotency purge: removed (\d+) outbox messages in database "$db" \(\d+ transactions?\)/g;
	return $n;
}

# Topic t (retention 0): groups fast and slow.  keep (retention 1 day):
# group k acknowledges everything.  nosub (retention 0): no group.  One
# transaction per message (autocommit), so that each has its own
# transaction id and a group's horizon can stop between two messages.
$node->safe_psql('postgres', q{
	SELECT idem_outbox_topic('t', retention => '0');
	SELECT idem_outbox_topic('keep', retention => '1 day');
	SELECT idem_outbox_topic('nosub', retention => '0');
	SELECT idem_outbox_subscribe('fast', 't', from_start => true);
	SELECT idem_outbox_subscribe('slow', 't', from_start => true);
	SELECT idem_outbox_subscribe('k', 'keep', from_start => true);
	CREATE PROCEDURE drain(consumer text, n int) LANGUAGE plpgsql AS $$
	DECLARE m record; left_ int := n;
	BEGIN
	    WHILE left_ > 0 LOOP
	        FOR m IN SELECT * FROM idem_outbox_fetch(consumer, least(left_, 50)) LOOP
	            PERFORM idem_outbox_ack(consumer, m.id);
	            left_ := left_ - 1;
	        END LOOP;
	        COMMIT;
	        EXIT WHEN NOT EXISTS (SELECT FROM idem_outbox_backlog b
	                               WHERE b.consumer = drain.consumer AND b.unacknowledged > 0);
	    END LOOP;
	END $$;
});
my $log_before = removed_messages(slurp_file($node->logfile), 'postgres');
$node->safe_psql('postgres',
	join('', map { "SELECT idem_publish('t', '{}', key => 'm$_');\n" } 1 .. 200)
	  . join('', map { "SELECT idem_publish('keep', '{}', key => 'm$_');\n" } 1 .. 20)
	  . join('', map { "SELECT idem_publish('nosub', '{}', key => 'm$_');\n" } 1 .. 30));
# fast acknowledges all 200, slow only the 120 oldest (commit order: no
# aggregate, each message a run of its own, handed out by position).
$node->safe_psql('postgres', q{
	CALL drain('fast', 200);
	CALL drain('slow', 120);
	CALL drain('k', 20);
});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(consumer || ':' || unacknowledged, ',' ORDER BY consumer)
		    FROM idem_outbox_backlog}),
	'fast:0,k:0,slow:80',
	'slow lags 80 messages behind');

ok( $node->poll_query_until(
		'postgres',
		q{SELECT count(*) FILTER (WHERE topic = 't') = 80
		     AND count(*) FILTER (WHERE topic = 'nosub') = 0
		    FROM idem_outbox}),
	'the worker purged the outbox');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM idem_outbox o
	 WHERE o.topic = 't'
	   AND o.id = ANY (SELECT idem_outbox_id('t', 'm' || i) FROM generate_series(121, 200) i)}),
	'80',
	'what is left of t is exactly what slow has not acknowledged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM idem_outbox WHERE topic = 'keep'}),
	'20', 'acknowledged messages within their retention are kept');
ok( wait_for_log(
		sub { removed_messages($_[0], 'postgres') - $log_before == 150 },
		'outbox LOG lines'),
	'the LOG lines account for the 150 messages removed');

# The lagging group catches up: the rest goes at the next rounds.
$node->safe_psql('postgres', q{CALL drain('slow', 80)});
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 0 FROM idem_outbox WHERE topic = 't'}),
	'once slow caught up, t is empty');

# An extension without the outbox (0.4.0): records purged, no outbox
# phase, no complaint.
$node->safe_psql('noext', q{
	DROP EXTENSION idempotency;
	CREATE EXTENSION idempotency VERSION '0.4.0';
	CREATE FUNCTION public.idem_outbox_purge(int) RETURNS bigint
	    LANGUAGE sql AS $$ SELECT 1/0 $$;
	INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 'old', 'k' || i, 'completed', now() - interval '2 days', now() - interval '2 days',
	       now() - interval '1 day'
	  FROM generate_series(1, 7) i});
ok( $node->poll_query_until(
		'noext', q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'old'}),
	'0.4.0: records purged');
$node->safe_psql('noext', q{
	INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 'old2', 'k' || i, 'completed', now() - interval '2 days', now() - interval '2 days',
	       now() - interval '1 day'
	  FROM generate_series(1, 3) i});
ok( $node->poll_query_until(
		'noext', q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'old2'}),
	'0.4.0: a second round');
unlike(slurp_file($node->logfile), qr/division by zero/,
	'a function idem_outbox_purge that is not the extension\'s is never run');

$node->stop;
done_testing();
