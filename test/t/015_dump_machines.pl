# pg_dump / pg_restore of a database that uses every feature: records,
# leases (and the fencing-token sequence), one-time tokens, machine
# definitions, a guarded table with a version column and transition
# history.  After the restore the data is identical and everything keeps
# working: the guard is enforced, history goes on, new tokens are greater
# than every token issued before the dump.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump_machines');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->start;
my $tmp = PostgreSQL::Test::Utils::tempdir;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql(
	'src', q{
	CREATE EXTENSION idempotency;
	SELECT idem_machine_define('order', '{
	    "initial": ["pending_payment"],
	    "transitions": {"pending_payment": ["paid", "cancelled"],
	                    "paid": ["shipped", "refunded"],
	                    "shipped": ["delivered"]}}');
	CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, version int NOT NULL DEFAULT 0);
	SELECT idem_guard('orders', 'status', 'order', version_column => 'version', history => true);
	INSERT INTO orders (id, status) VALUES (1, 'pending_payment'), (2, 'pending_payment');
	UPDATE orders SET status = 'paid' WHERE id = 1;
	UPDATE orders SET status = 'shipped' WHERE id = 1;
	UPDATE orders SET status = 'cancelled' WHERE id = 2;
	SELECT idem_claim('pay', 'evt-1');
	SELECT outcome FROM idem_begin('gw', 'charge-1');
	CREATE TABLE issued (token text);
	INSERT INTO issued SELECT idem_token_issue('form', '1 hour');
});

my %q = (
	machines => q{SELECT string_agg(format('%s %s', machine, definition), E'\n' ORDER BY machine) FROM idem_machines},
	history => q{SELECT string_agg(format('%s %s %s>%s %s', table_name, row_key, from_state, to_state, xact_id),
	                               E'\n' ORDER BY id) FROM idem_transition_log},
	orders => q{SELECT string_agg(format('%s %s %s', id, status, version), E'\n' ORDER BY id) FROM orders},
	records => q{SELECT string_agg(format('%s %s %s %s', scope, key, status, token), E'\n' ORDER BY scope, key) FROM idem_records},
);
my %before = map { $_ => $node->safe_psql('src', $q{$_}) } keys %q;
my $max_token = $node->safe_psql('src', 'SELECT max(token) FROM idem_records');
like($before{history}, qr/paid>shipped/, 'source has transition history');

$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', "$tmp/src.dump" ],
	'pg_dump -Fc');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst'), "$tmp/src.dump" ],
	'pg_restore');

foreach my $what (sort keys %q)
{
	is($node->safe_psql('dst', $q{$what}), $before{$what}, "$what restored");
}

# Everything keeps working in the restored database.
is($node->safe_psql('dst', q{SELECT idem_can_transition('order', 'paid', 'shipped')}),
	't', 'machine definition works');
my ($ret, $out, $err) = $node->psql('dst', q{UPDATE orders SET status = 'pending_payment' WHERE id = 1});
isnt($ret, 0, 'guard still refuses a backward move');
like($err, qr/illegal/i, 'with the illegal-transition error');
$node->safe_psql('dst', q{UPDATE orders SET status = 'delivered' WHERE id = 1});
is($node->safe_psql('dst', q{SELECT status || ' ' || version FROM orders WHERE id = 1}),
	'delivered 3', 'a legal move works and bumps the version');
is($node->safe_psql('dst',
		q{SELECT count(*) FROM idem_transition_log WHERE to_state = 'delivered'}),
	'1', 'history goes on');
is($node->safe_psql('dst', q{SELECT idem_claim('pay', 'evt-1')}), 'f', 'claims are still duplicates');
my $new_token = $node->safe_psql('dst', q{SELECT token FROM idem_begin('gw', 'charge-2')});
ok($new_token > $max_token, "a new fencing token ($new_token) is greater than any before the dump ($max_token)");
is($node->safe_psql('dst', q{SELECT idem_token_consume('form', token) FROM issued}),
	't', 'a token issued before the dump is consumed once after it');
is($node->safe_psql('dst', q{SELECT idem_token_consume('form', token) FROM issued}),
	'f', 'and only once');

$node->stop;
done_testing();
