# On a hot standby (a streaming replica), idem_lookup, idem_await,
# idem_summary and idem_can_transition read what was replicated from the
# primary, and every writing function fails with the standard read-only
# SQLSTATE 25006 and a message naming the function.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION idempotency');

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

$primary->safe_psql(
	'postgres', q{
	SELECT idem_claim('pay', 'order-1', NULL, 'request 1');
	SELECT idem_complete('pay', 'order-1', '{"receipt": "r-1"}');
	SELECT idem_claim('pay', 'order-2');
	SELECT idem_claim('pay', 'expired');
	UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE key = 'expired';
	SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
	SELECT outcome FROM idem_begin('gw', 'leased');
});
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby is in recovery');

# idem_lookup works on the standby.
is( $standby->safe_psql(
		'postgres', q{
		SELECT r.status, r.result, r.fingerprint = sha256('request 1'::bytea)
		FROM idem_lookup('pay', 'order-1') AS r}),
	'completed|{"receipt": "r-1"}|t',
	'lookup on the standby returns the replicated record');
is( $standby->safe_psql(
		'postgres', q{SELECT (idem_lookup('pay', 'order-2')).status}),
	'claimed', 'lookup of a claimed record');
is( $standby->safe_psql(
		'postgres', q{
		SELECT idem_lookup('pay', 'absent') IS NULL,
		       idem_lookup('pay', 'expired') IS NULL}),
	't|t', 'lookup of absent and expired keys is NULL');

is( $standby->safe_psql(
		'postgres', q{
		SELECT idem_can_transition('order', 'new', 'paid'),
		       idem_can_transition('order', 'paid', 'new')}),
	't|f', 'idem_can_transition works on the standby');
is( $standby->safe_psql(
		'postgres', q{SELECT scope, records, claimed, completed, in_progress, expired FROM idem_summary ORDER BY scope}),
	"gw|1|0|0|1|0\npay|3|2|1|0|1", 'idem_summary works on the standby');
is( $standby->safe_psql(
		'postgres', q{SELECT status FROM idem_await('gw', 'leased', '10 milliseconds')}),
	'in_progress', 'idem_await works on the standby');

# Every writing function fails with 25006 and names itself, whether or
# not it would have written anything.
my %calls = (
	'idem_claim' => [
		q{SELECT idem_claim('pay', 'new-key')},
		q{SELECT idem_claim('pay', 'order-1')},
		q{SELECT idem_claim('new-key')},
		q{SELECT idem_claim('pay', 'new-key', '1 hour', 'fp')},
	],
	'idem_complete' => [q{SELECT idem_complete('pay', 'order-2', '1')}],
	'idem_release'  => [
		q{SELECT idem_release('pay', 'order-1')},
		q{SELECT idem_release('pay', 'absent')},
	],
	'idem_purge' => [ q{SELECT idem_purge()}, q{SELECT idem_purge(1)} ],
	'idem_begin' => [q{SELECT * FROM idem_begin('gw', 'other')}],
	'idem_heartbeat' => [q{SELECT idem_heartbeat('gw', 'leased', 1)}],
	'idem_finish' => [q{SELECT idem_finish('gw', 'leased', 1)}],
	'idem_fail' => [q{SELECT idem_fail('gw', 'leased', 1)}],
	'idem_claim_many' => [q{SELECT * FROM idem_claim_many('pay', ARRAY['a', 'b'])}],
	'idem_token_issue' => [q{SELECT idem_token_issue('form')}],
	'idem_token_consume' => [q{SELECT idem_token_consume('form', repeat('a', 32))}],
	'idem_machine_define' => [q{SELECT idem_machine_define('m2', '{"initial": ["a"], "transitions": {}}')}],
	'idem_machine_drop' => [q{SELECT idem_machine_drop('order')}],);

for my $fname (sort keys %calls)
{
	for my $sql (@{ $calls{$fname} })
	{
		my ($ret, $out, $err) =
		  $standby->psql('postgres', "\\set VERBOSITY verbose\n$sql");
		isnt($ret, 0, "standby: $sql fails");
		like(
			$err,
			qr/ERROR:  25006: cannot execute \Q$fname\E\(\) in a read-only transaction/,
			"standby: $sql fails with 25006 naming $fname");
	}
}

# The primary is unaffected and still the place to write.
is( $primary->safe_psql(
		'postgres', q{
		SELECT idem_claim('pay', 'order-1'), idem_claim('pay', 'new-key')}),
	'f|t', 'primary still claims');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres', q{SELECT (idem_lookup('pay', 'new-key')).status}),
	'claimed', 'the new claim is replicated and visible on the standby');

$standby->stop;
$primary->stop;
done_testing();
