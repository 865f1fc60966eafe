# pg_dump / pg_restore keep the records (idem_records is registered with
# pg_extension_config_dump): every field survives, in custom and in plain
# format, with the extension in a schema of its own; after the restore,
# recorded keys are still duplicates, fingerprints are still checked and
# results can still be replayed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump_restore');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->start;

my $tmp = PostgreSQL::Test::Utils::tempdir;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql(
	'src', q{
	CREATE SCHEMA idem;
	CREATE EXTENSION idempotency SCHEMA idem;
	SELECT idem.idem_claim('shop', 'order-1', NULL, 'request 1');
	SELECT idem.idem_complete('shop', 'order-1', '{"receipt": "r-1", "amount": 100}');
	SELECT idem.idem_claim('shop', 'order-2', '1 hour', 'request 2');
	SELECT idem.idem_claim('default-scope-key');
	SELECT idem.idem_claim('shop', 'caf' || U&'\00E9' || ' "quoted" \ key, tab:' || chr(9));
	SELECT idem.idem_claim('shop', 'completed-null');
	-- completed without a result (idem_complete refuses NULL since 0.6.0;
	-- such records remain from before)
	UPDATE idem.idem_records SET status = 'completed' WHERE key = 'completed-null';
	SET idempotency.default_ttl = 'infinity';
	SELECT idem.idem_claim('shop', 'forever');
	RESET idempotency.default_ttl;
	SELECT idem.idem_claim('shop', 'expired');
	UPDATE idem.idem_records SET expires_at = now() - interval '1 day' WHERE key = 'expired';
	-- A user table next to it, dumped as usual.
	CREATE TABLE orders (id text PRIMARY KEY);
	INSERT INTO orders VALUES ('order-1');
});

# Every column of every record, as text, in a fixed order.
my $records_sql = q{
	SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s',
	                         scope, key, status, encode(fingerprint, 'hex'), result,
	                         created_at, updated_at, expires_at, locked_until, token,
	                         attempts), E'\n' ORDER BY scope, key)
	FROM idem.idem_records};
my $before = $node->safe_psql('src', $records_sql);
my $count  = $node->safe_psql('src', 'SELECT count(*) FROM idem.idem_records');
is($count, 7, 'source has the records');

sub check_restored
{
	my ($db, $how) = @_;

	is($node->safe_psql($db, $records_sql), $before,
		"$how: every record restored with every field");
	is($node->safe_psql($db, 'SELECT count(*) FROM orders'), '1',
		"$how: user data restored");
	is( $node->safe_psql(
			$db, q{
			SELECT n.nspname FROM pg_extension e
			JOIN pg_namespace n ON n.oid = e.extnamespace
			WHERE e.extname = 'idempotency'}),
		'idem',
		"$how: extension restored in its schema");

	# The restored records still work.
	is( $node->safe_psql(
			$db, q{
			SELECT idem.idem_claim('shop', 'order-1', NULL, 'request 1'),
			       idem.idem_claim('shop', 'order-2'),
			       idem.idem_claim('default-scope-key'),
			       idem.idem_claim('shop', 'forever'),
			       idem.idem_claim('shop', 'expired'),
			       idem.idem_claim('shop', 'new-key')}),
		'f|f|f|f|t|t',
		"$how: recorded keys are duplicates, expired and new keys are free");
	is( $node->safe_psql(
			$db, q{SELECT (idem.idem_lookup('shop', 'order-1')).result}),
		'{"amount": 100, "receipt": "r-1"}',
		"$how: stored result replayed");
	my ($ret, $out, $err) = $node->psql($db,
		q{SELECT idem.idem_claim('shop', 'order-1', NULL, 'request 2')});
	isnt($ret, 0, "$how: fingerprint mismatch fails");
	like($err, qr/idempotency key reused with a different request/,
		"$how: fingerprint still checked");
	return;
}

# Custom format, restored into a new database.
$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', "$tmp/src.dump" ],
	'pg_dump -Fc');
$node->safe_psql('postgres', 'CREATE DATABASE dst_custom');
$node->command_ok(
	[
		'pg_restore', '--exit-on-error', '-d', $node->connstr('dst_custom'),
		"$tmp/src.dump"
	],
	'pg_restore');
check_restored('dst_custom', 'custom format');

# Plain format, replayed with psql.
$node->command_ok(
	[ 'pg_dump', '-Fp', '-d', $node->connstr('src'), '-f', "$tmp/src.sql" ],
	'pg_dump -Fp');
$node->safe_psql('postgres', 'CREATE DATABASE dst_plain');
$node->command_ok(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
		$node->connstr('dst_plain'), '-f', "$tmp/src.sql"
	],
	'psql < plain dump');
check_restored('dst_plain', 'plain format');

# The source is unchanged by all this.
is($node->safe_psql('src', $records_sql), $before, 'source unchanged');

$node->stop;
done_testing();
