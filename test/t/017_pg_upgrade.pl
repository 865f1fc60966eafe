# pg_upgrade from an older major to this one, as a DBA does at every major
# upgrade: a cluster of the older PostgreSQL (IDEM_OLD_BINDIR, set by
# `make test-matrix`, or by `make test IDEM_UPGRADE_FROM=/old/pg_config`)
# with records in every status, machines, a guarded table with history
# and a version column, leases with fencing tokens and one-time tokens, is
# upgraded with this major's pg_upgrade (the extension installed in both).
# Afterwards everything is there, claims and transitions behave, and the
# token sequence never reissues a token.
use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old_bindir = $ENV{IDEM_OLD_BINDIR} // '';
plan skip_all => 'no older PostgreSQL given (IDEM_UPGRADE_FROM; make test-matrix sets it)'
  unless $old_bindir ne '' && -x "$old_bindir/pg_ctl";

my $old = PostgreSQL::Test::Cluster->new('old', install_path => dirname($old_bindir));
my $new = PostgreSQL::Test::Cluster->new('new');
my $new_major = $new->pg_version->major;
# initdb turns data checksums on by default from 18 on: both alike.
$old->init($new_major >= 18 ? (extra => ['--data-checksums']) : ());
$old->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$old->start;
my $old_major = $old->pg_version->major;

$old->safe_psql(
	'postgres', q{
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
	UPDATE orders SET status = 'cancelled' WHERE id = 2;

	-- Records in every status.
	SELECT idem_claim('pay', 'claimed');
	SELECT idem_claim('pay', 'completed');
	SELECT idem_complete('pay', 'completed', '{"receipt": 1}');
	CREATE TABLE leases (name text PRIMARY KEY, token bigint);
	INSERT INTO leases SELECT 'live', token FROM idem_begin('gw', 'live', '1 hour');
	INSERT INTO leases SELECT 'failed', token FROM idem_begin('gw', 'failed');
	SELECT idem_fail('gw', 'failed', (SELECT token FROM leases WHERE name = 'failed'), '{"e": 1}', false);
	INSERT INTO leases SELECT 'retry', token FROM idem_begin('gw', 'retry');
	SELECT idem_fail('gw', 'retry', (SELECT token FROM leases WHERE name = 'retry'), '{"e": 2}', true);
	CREATE TABLE forms (name text PRIMARY KEY, token text);
	INSERT INTO forms SELECT 'issued', idem_token_issue('form', '1 hour');
	INSERT INTO forms SELECT 'consumed', idem_token_issue('form', '1 hour');
	SELECT idem_token_consume('form', (SELECT token FROM forms WHERE name = 'consumed'));
});

my %q = (
	statuses => q{SELECT string_agg(status, ' ' ORDER BY status) FROM idem_records},
	records => q{SELECT string_agg(format('%s %s %s %s %s %s', scope, key, status, result, token, attempts),
	                               E'\n' ORDER BY scope, key) FROM idem_records},
	machines => q{SELECT string_agg(format('%s %s', machine, definition), E'\n' ORDER BY machine) FROM idem_machines},
	history => q{SELECT string_agg(format('%s %s %s>%s', table_name, row_key, from_state, to_state),
	                               E'\n' ORDER BY id) FROM idem_transition_log},
	orders => q{SELECT string_agg(format('%s %s %s', id, status, version), E'\n' ORDER BY id) FROM orders},
	version => q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'},
);
my %before = map { $_ => $old->safe_psql('postgres', $q{$_}) } keys %q;
is($before{statuses}, 'claimed completed consumed failed in_progress issued retryable',
	"PostgreSQL $old_major cluster has a record in every status");
my $max_token = $old->safe_psql('postgres', 'SELECT max(token) FROM idem_records');
$old->stop;

$new->init;

$new->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
my $new_bindir = $new->config_data('--bindir');
$new->command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $old_bindir, '-B', $new_bindir,
		'-s', $new->host, '-p', $old->port, '-P', $new->port
	],
	"pg_upgrade from $old_major to $new_major");
$new->start;

foreach my $what (sort keys %q)
{
	is($new->safe_psql('postgres', $q{$what}), $before{$what}, "$what kept by pg_upgrade");
}

# Everything keeps working.
is($new->safe_psql('postgres', q{SELECT idem_claim('pay', 'claimed')}), 'f', 'a claimed key is a duplicate');
is($new->safe_psql('postgres', q{SELECT idem_claim('pay', 'new')}), 't', 'a new key is claimed');
is($new->safe_psql('postgres', q{SELECT outcome FROM idem_begin('gw', 'live')}), 'in_progress',
	'a live lease is still held');
$new->safe_psql('postgres',
	q{SELECT idem_finish('gw', 'live', (SELECT token FROM leases WHERE name = 'live'), '{"done": true}')});
is($new->safe_psql('postgres', q{SELECT status FROM idem_records WHERE key = 'live'}), 'completed',
	'its holder finishes it with the token from before the upgrade');
my ($token, $outcome) = split /\|/,
  $new->safe_psql('postgres', q{SELECT token || '|' || outcome FROM idem_begin('gw', 'retry')});
is($outcome, 'acquired', 'a retryable key is taken over');
ok($token > $max_token, "its new fencing token ($token) is greater than any before the upgrade ($max_token)");
is($new->safe_psql('postgres', q{SELECT idem_token_consume('form', token) FROM forms WHERE name = 'issued'}),
	't', 'a one-time token issued before the upgrade is consumed once');
is($new->safe_psql('postgres', q{SELECT idem_token_consume('form', token) FROM forms WHERE name = 'consumed'}),
	'f', 'a consumed one stays consumed');
my ($ret, $out, $err) = $new->psql('postgres', q{UPDATE orders SET status = 'pending_payment' WHERE id = 1});
isnt($ret, 0, 'the guard still refuses a backward move');
like($err, qr/ID004|illegal/i, 'with the illegal-transition error');
$new->safe_psql('postgres', q{UPDATE orders SET status = 'shipped' WHERE id = 1});
is($new->safe_psql('postgres', q{SELECT status || ' ' || version FROM orders WHERE id = 1}),
	'shipped 2', 'a legal move works and bumps the version');
is($new->safe_psql('postgres', q{SELECT count(*) FROM idem_transition_log WHERE to_state = 'shipped'}),
	'1', 'history goes on');
is($new->safe_psql('postgres', q{SELECT idem_transition('order', 'paid', 'shipped')}), 'shipped',
	'idem_transition works');
$new->safe_psql('postgres', 'ALTER EXTENSION idempotency UPDATE');
is($new->safe_psql('postgres', $q{version}), $before{version}, 'ALTER EXTENSION UPDATE is a no-op');

$new->stop;
done_testing();
