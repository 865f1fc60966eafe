# A purge that cannot run must say so where a DBA looks, and one that runs
# must show in idem_health:
# - idempotency.purge_databases set without the library in
#   shared_preload_libraries: loading the library gives a WARNING (to the
#   session and in the server log), idem_purge_worker() says 'not
#   preloaded' and idem_health's hint names the missing preload;
# - preloaded, with the database listed: the worker's rounds are noted in
#   idem_maintenance, so idem_health shows when the records and the outbox
#   were last purged, by the background worker, and that all is well;
# - purge_naptime 0 pauses the worker, and idem_health says so.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('health');
$node->init;
$node->append_conf('postgresql.conf', q{
idempotency.purge_databases = 'postgres'
idempotency.purge_naptime = 1s
idempotency.purge_delay = 0
});
$node->start;

# Not preloaded: the first call of the library says the purge cannot run.
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION idempotency');
is($ret, 0, 'CREATE EXTENSION');
($ret, $stdout, $stderr) = $node->psql('postgres', 'SELECT idem_purge_worker()');
is($stdout, 'not preloaded', 'idem_purge_worker() without the preload');
like(
	$stderr,
	qr/WARNING:  idempotency.purge_databases is set, but idempotency is not in shared_preload_libraries: no background purge runs/,
	'loading the library without the preload warns the session');
like(
	slurp_file($node->logfile),
	qr/WARNING:  idempotency.purge_databases is set, but idempotency is not in shared_preload_libraries/,
	'and the server log');
like(
	$node->safe_psql('postgres', q{SELECT string_agg(part || ': ' || purger || ' ' || ok || ' ' || hint, E'\n' ORDER BY part) FROM idem_health}),
	qr/^outbox: none false idempotency.purge_databases is set \(postgres\), but idempotency is not in shared_preload_libraries, so no worker runs: add it there and restart, or schedule SELECT public.idem_maintain\(\) every minute with pg_cron.\nrecords: none false idempotency.purge_databases is set/,
	'idem_health names the missing preload and what to schedule');

# Expired records and an outbox message past its retention.
$node->safe_psql('postgres', q{
BEGIN;
SELECT idem_claim('h', 'k' || i) FROM generate_series(1, 5) i;
COMMIT;
BEGIN;
SELECT idem_publish('h.topic', '{}', key => 'm1');
COMMIT;
UPDATE idem_records SET expires_at = now() - interval '1 hour';
UPDATE idem_outbox SET created_at = now() - interval '8 days';
});
is($node->safe_psql('postgres', q{SELECT string_agg(part || '=' || waiting, ',' ORDER BY part) FROM idem_health}),
	'outbox=1,records=5', 'idem_health counts what waits');

# Preloaded: the worker purges both and notes it.
$node->append_conf('postgresql.conf', q{shared_preload_libraries = 'idempotency'});
$node->restart;
is($node->safe_psql('postgres', 'SELECT idem_purge_worker()'), 'on', 'idem_purge_worker() with the preload');
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 2 FROM idem_health
	 WHERE last_purged IS NOT NULL AND purged_by = 'background worker'}),
	'the worker notes its rounds in idem_maintenance');
is( $node->safe_psql(
		'postgres', q{SELECT string_agg(part || ' ' || waiting || ' ' || purger || ' ' || ok || ' ' || coalesce(hint, '-'), E'\n' ORDER BY part) FROM idem_health}),
	"outbox 0 background worker true -\nrecords 0 background worker true -",
	'idem_health: nothing waits, the worker purges, all is well');
unlike(slurp_file($node->logfile), qr/ERROR|FATAL/, 'no error in the server log');

# Paused.
$node->append_conf('postgresql.conf', q{idempotency.purge_naptime = 0});
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT idem_purge_worker() = 'paused'}), 'naptime 0: paused');
like($node->safe_psql('postgres', q{SELECT hint FROM idem_health WHERE part = 'records'}),
	qr/idempotency.purge_naptime is 0/, 'idem_health says the worker is paused');

$node->stop;
done_testing();
