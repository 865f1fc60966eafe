# idem_await wakes up when the lease owner finishes: a waiter started with a
# long timeout returns the completed record (with the stored result) once
# the owner calls idem_finish.  Had it slept through to its timeout it
# would report 'in_progress' instead, so no timing needs asserting.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('await');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

my $token = $node->safe_psql('postgres',
	"SELECT token FROM idem_begin('gw', 'charge-1', lease => '10 minutes')");
like($token, qr/^\d+$/, 'owner acquired a lease');

my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, q(\echo waiting
SELECT 'await:' || status || ':' || result::text FROM idem_await('gw', 'charge-1', '10 minutes');
));

# The waiter is sleeping inside idem_await (wait event of type Extension),
# holding no lock that the owner could block on.
ok( $node->poll_query_until(
		'postgres', q(
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE wait_event_type = 'Extension' AND query LIKE '%idem_await%')),
	'waiter is waiting in idem_await');
is( $node->safe_psql(
		'postgres', q(
	SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	 WHERE a.query LIKE '%idem_await%' AND a.pid <> pg_backend_pid()
	   AND l.locktype IN ('tuple', 'transactionid') AND l.mode <> 'ExclusiveLock')),
	'0', 'waiter holds no row or transaction lock');

$node->safe_psql('postgres',
	"SELECT idem_finish('gw', 'charge-1', $token, '{\"receipt\": \"r-42\"}')");

my $out = $waiter->query_safe("SELECT 'after'");
like($out, qr/await:completed:\{"receipt": "r-42"\}/,
	'waiter returned the completed record with its result');
$waiter->quit;

# A waiter on a key whose owner dies (never finishes) returns when the
# lease runs out, with the record still in progress and takeable.
$token = $node->safe_psql('postgres',
	"SELECT token FROM idem_begin('gw', 'charge-2', lease => '1 second')");
my $status = $node->safe_psql('postgres',
	"SELECT status || ':' || (locked_until <= clock_timestamp())::text FROM idem_await('gw', 'charge-2', '10 minutes')");
is($status, 'in_progress:true', 'await returns when the lease runs out');
is( $node->safe_psql(
		'postgres', "SELECT outcome FROM idem_begin('gw', 'charge-2')"),
	'acquired', 'the abandoned key is taken over');

# statement_timeout interrupts a waiter with the normal error.
$node->safe_psql('postgres',
	"SELECT outcome FROM idem_begin('gw', 'charge-3', lease => '10 minutes')");
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET statement_timeout = '200ms'; SELECT idem_await('gw', 'charge-3', '10 minutes')");
isnt($ret, 0, 'await under statement_timeout fails');
like($stderr, qr/canceling statement due to statement timeout/,
	'with the statement timeout error');

$node->stop;
done_testing();
