# On a hot standby (a streaming replica), idem_lookup reads the records
# replicated from the primary, and every writing function fails with the
# standard read-only SQLSTATE 25006 and a message naming the function.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
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
	'idem_purge' => [ q{SELECT idem_purge()}, q{SELECT idem_purge(1)} ],);

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
