# The background purge (issue 5, part 1).  With the library preloaded and
# idempotency.purge_databases = 'postgres, noext, nodb':
# - expired records in postgres disappear by themselves, in batches, while
#   claims of other keys go on (none blocked: each runs under lock_timeout),
#   and the LOG lines account for every record removed;
# - noext (no extension) gets exactly one WARNING, nodb (no such database)
#   exactly one, however many rounds pass; both are picked up once they
#   change;
# - a round that fails is retried at the next naptime, without restarting
#   the server, and purging resumes once the cause is gone;
# - idem_stats counts what the worker purged.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('purge');
$node->init;
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

$node->stop;
done_testing();
