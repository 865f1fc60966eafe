# Many clients claiming overlapping keys at once (pgbench): a balance is
# credited only when idem_claim returns true, so it must end up equal to
# the number of distinct keys claimed - no key processed twice, no claimed
# key left unprocessed - under READ COMMITTED and under REPEATABLE READ
# (where conflicts raise 40001 and pgbench retries the transaction).  Some
# transactions roll back after their claim, which must free the key.
# Finally, idempotency.log_duplicates writes one server LOG line per
# duplicate.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $clients      = 8;
my $transactions = 250;    # per client
my $keys         = 500;    # small range: heavy overlap

my $node = PostgreSQL::Test::Cluster->new('pgbench_claims');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf('postgresql.conf', "max_connections = 40\n");
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION idempotency;
	-- One account per client (so REPEATABLE READ conflicts come from the
	-- claims, not from every client updating one row).
	CREATE TABLE account (client int PRIMARY KEY, balance bigint NOT NULL);
	INSERT INTO account SELECT c, 0 FROM generate_series(0, 63) AS c;
	-- Every credit, with the key it was for: no unique constraint, so a
	-- double processing would show up here instead of failing the run.
	CREATE TABLE ledger (scope text, key text, client int);
});

# One business transaction: claim a random key; credit and record it only
# when the claim returns true; roll back one transaction in twenty.
my $script = <<'EOS';
\set k random(1, KEYS)
\set fail random(1, 20)
BEGIN ISOLATION LEVEL ISOLEVEL;
SELECT idem_claim('SCOPE', 'key-' || :k) AS owned \gset
\if :owned
UPDATE account SET balance = balance + 1 WHERE client = :client_id;
INSERT INTO ledger VALUES ('SCOPE', 'key-' || :k, :client_id);
SELECT idem_complete('SCOPE', 'key-' || :k, jsonb_build_object('client', :client_id));
\endif
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
EOS

sub run_and_check
{
	my ($scope, $isolation, $extra_opts) = @_;

	my $body = $script;
	$body =~ s/KEYS/$keys/g;
	$body =~ s/ISOLEVEL/$isolation/g;
	$body =~ s/SCOPE/$scope/g;

	$node->safe_psql('postgres', 'UPDATE account SET balance = 0');

	my $total = $clients * $transactions;
	$node->pgbench(
		"-n -c $clients -j 2 -t $transactions $extra_opts",
		0,
		[
			qr{number of transactions actually processed: $total/$total},
			qr{number of failed transactions: 0 }
		],
		[qr{^$}],
		"pgbench claims ($isolation)",
		{ "claims_$scope" => $body });

	my ($balance, $credits, $credited_keys, $records, $completed, $unmatched)
	  = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT (SELECT sum(balance) FROM account),
		       (SELECT count(*) FROM ledger WHERE scope = '$scope'),
		       (SELECT count(DISTINCT key) FROM ledger WHERE scope = '$scope'),
		       (SELECT count(*) FROM idem_records WHERE scope = '$scope'),
		       (SELECT count(*) FROM idem_records WHERE scope = '$scope'
		          AND status = 'completed'),
		       (SELECT count(*) FROM idem_records r
		        WHERE r.scope = '$scope' AND NOT EXISTS
		          (SELECT 1 FROM ledger l WHERE l.scope = r.scope AND l.key = r.key))
		       +
		       (SELECT count(*) FROM ledger l
		        WHERE l.scope = '$scope' AND NOT EXISTS
		          (SELECT 1 FROM idem_records r WHERE r.scope = l.scope AND r.key = l.key))});

	note "$isolation: balance $balance, credits $credits, keys $credited_keys, "
	  . "records $records";
	ok($credited_keys > 0 && $credited_keys <= $keys,
		"$isolation: some keys were claimed, none outside the range");
	ok($records < $total,
		"$isolation: claims overlapped (fewer records than transactions)");
	is($credits, $credited_keys,
		"$isolation: no key was credited twice");
	is($balance, $credited_keys,
		"$isolation: balance equals the number of distinct keys claimed");
	is($records, $credited_keys,
		"$isolation: every record was credited (nothing lost)");
	is($completed, $records, "$isolation: every record is completed");
	is($unmatched, 0,
		"$isolation: records and credits are the same set of keys");

	# A second pass over every key: all are duplicates or, for keys never
	# claimed (or whose claim rolled back), claimed now exactly once.
	my $second = $node->safe_psql(
		'postgres', qq{
		SELECT count(*) FILTER (WHERE idem_claim('$scope', 'key-' || i))
		FROM generate_series(1, $keys) AS i});
	is($second, $keys - $records,
		"$isolation: afterwards exactly the unclaimed keys are free");
	return;
}

run_and_check('rc', 'READ COMMITTED', '');
run_and_check('rr', 'REPEATABLE READ', '--max-tries=1000');

# Lockstep: every client claims the same new key at the same moment (the
# key is the current half-millisecond), so claims of a key that does not
# exist yet collide between the primary-key probe and the index entry of
# the fast path (src/claim_direct.c) and must restart as ExecInsert does.  Each
# key has exactly one winner, whose ledger row is written in the same
# statement; no client sees an error.  Once with the fast path, once
# through SPI.
$node->safe_psql('postgres', 'CREATE TABLE winners (scope text, key text)');
for my $mode ('on', 'off')
{
	my $scope = "lockstep_$mode";
	$node->pgbench(
		"-n -c $clients -j 2 -T 3",
		0,
		[ qr{number of failed transactions: 0 } ],
		[qr{^$}],
		"lockstep claims (direct_claim $mode)",
		{
			"lockstep_$mode" => qq{
SET idempotency.direct_claim = $mode;
INSERT INTO winners
SELECT '$scope', k
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 2000)::bigint::text AS k) AS t
WHERE idem_claim('$scope', k);
}
		});
	my ($wins, $keys_won, $records) = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT (SELECT count(*) FROM winners WHERE scope = '$scope'),
		       (SELECT count(DISTINCT key) FROM winners WHERE scope = '$scope'),
		       (SELECT count(*) FROM idem_records WHERE scope = '$scope')});
	note "lockstep ($mode): $wins wins, $records records";
	cmp_ok($records, '>', 0, "lockstep ($mode): keys were claimed");
	is($wins, $keys_won, "lockstep ($mode): no key won twice");
	is($wins, $records, "lockstep ($mode): every record has its one winner");
}

# idempotency.log_duplicates: one LOG line per duplicate claim.
my $offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
	SET idempotency.log_duplicates = on;
	SELECT idem_claim('rc', 'key-1');
	SELECT idem_claim('rc', 'key-1');
	SELECT idem_claim('rc', 'key-2');
	SELECT idem_claim('rc', 'never-claimed-before');
});
my $log = slurp_file($node->logfile, $offset);
my @lines = ($log =~
	  /LOG:  idempotency: duplicate claim of key "key-\d" in scope "rc", first claimed at [^,]+, status \w+/g
);
is(scalar(@lines), 3, 'log_duplicates: one LOG line per duplicate');
unlike($log, qr/duplicate claim of key "never-claimed-before"/,
	'log_duplicates: owned claims are not logged');

$node->stop;
done_testing();
