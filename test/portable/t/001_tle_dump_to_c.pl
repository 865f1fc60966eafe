# From the portable edition to the C edition by pg_dump (see
# docs/managed.md "Moving between editions"): a database that uses the
# pg_tle edition (registered and created by a role in pgtle_admin, without
# superuser) is dumped and restored into a server of the C edition, and
# everything continues there: claims stay duplicates, results replay, a
# lease begun before the dump finishes with its fencing token, new tokens
# are greater than every token before the dump, one-time tokens are used
# once, batch claims see the old records, machines answer, and the guards
# the portable idem_guard made are real guards of the C edition (they
# refuse, count for idem_machine_drop, and are found by idem_unguard).
#
# Run by test/scripts/portable.sh (step "tap") with:
#   IDEM_TLE_INSTALL  an installation with pg_tle and without the C edition
#   IDEM_C_INSTALL    an installation with the C edition
#   IDEM_TLE_FILE     build/tle/idempotency--pgtle.sql
# and skipped without them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($tle_install, $c_install, $tle_file) =
  @ENV{qw(IDEM_TLE_INSTALL IDEM_C_INSTALL IDEM_TLE_FILE)};
plan skip_all => 'needs pg_tle (IDEM_TLE_INSTALL, IDEM_C_INSTALL, IDEM_TLE_FILE: test/scripts/portable.sh sets them where pg_tle is installed)'
  unless $tle_install && $c_install && $tle_file;

my $tmp = PostgreSQL::Test::Utils::tempdir;

# --- the pg_tle edition, as on a managed service -----------------------------
my $src = PostgreSQL::Test::Cluster->new('tle', install_path => $tle_install);
$src->init;
$src->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$src->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_tle'\n");
$src->start;
$src->safe_psql('postgres', q{
	CREATE ROLE admin LOGIN NOSUPERUSER;
	CREATE DATABASE app OWNER admin;
});
$src->safe_psql('app', q{
	CREATE EXTENSION pg_tle;
	GRANT pgtle_admin TO admin;
});
my $as_admin = [ extra_params => [ '-U', 'admin' ] ];
$src->safe_psql('app', slurp_file($tle_file), @$as_admin);
$src->safe_psql('app', 'CREATE EXTENSION idempotency', @$as_admin);
is($src->safe_psql('app', q{
	SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
	 WHERE p.oid = 'idem_claim(text,text,interval,text)'::regprocedure}),
	'plpgsql', 'the source runs the portable edition');

$src->safe_psql('app', q{
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
	SELECT idem_claim('pay', 'evt-1');
	BEGIN;
	SELECT idem_claim('pay', 'evt-2');
	SELECT idem_complete('pay', 'evt-2', '{"ok": 2}');
	COMMIT;
	SELECT * FROM idem_claim_many('batch', ARRAY['b1', 'b2']);
	CREATE TABLE leases (token bigint);
	INSERT INTO leases SELECT token FROM idem_begin('gw', 'charge-1', '1 hour');
	CREATE TABLE issued (token text);
	INSERT INTO issued SELECT idem_token_issue('form', '1 hour');
}, @$as_admin);
my $lease_token = $src->safe_psql('app', 'SELECT token FROM leases');
my $max_token = $src->safe_psql('app', 'SELECT max(token) FROM idem_records');
my %q = (
	records => q{SELECT string_agg(format('%s %s %s %s %s', scope, key, status, result, token), E'\n' ORDER BY scope, key) FROM idem_records},
	machines => q{SELECT string_agg(format('%s %s', machine, definition), E'\n' ORDER BY machine) FROM idem_machines},
	history => q{SELECT string_agg(format('%s %s %s>%s', table_name, row_key, from_state, to_state), E'\n' ORDER BY id) FROM idem_transition_log},
	orders => q{SELECT string_agg(format('%s %s %s', id, status, version), E'\n' ORDER BY id) FROM orders},
	triggers => q{SELECT string_agg(pg_get_triggerdef(oid), E'\n' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = 'orders'::regclass},
);
my %before = map { $_ => $src->safe_psql('app', $q{$_}) } keys %q;
like($before{history}, qr/pending_payment>paid/, 'the source has history');

$src->command_ok(
	[ 'pg_dump', '-Fc', '-d', $src->connstr('app'), '-f', "$tmp/app.dump" ],
	'pg_dump of the pg_tle edition');

# --- the C edition ---------------------------------------------------------------
# The dump holds pg_tle (its schema, extension, the registration's
# functions and data) and CREATE EXTENSION idempotency: everything but
# pg_tle is restored, and CREATE EXTENSION finds the C edition there.
my $dst = PostgreSQL::Test::Cluster->new('c', install_path => $c_install);
$dst->init;
$dst->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$dst->start;
$dst->safe_psql('postgres', q{
	CREATE ROLE admin LOGIN NOSUPERUSER;
	CREATE DATABASE app OWNER admin;
});
my ($list) = run_command([ $dst->installed_command('pg_restore'), '-l', "$tmp/app.dump" ]);
my @kept = grep { !/\bpg_?tle\b/ } split /\n/, $list;
ok(scalar(grep { /EXTENSION - idempotency/ } @kept), 'the restore list keeps CREATE EXTENSION idempotency');
is(scalar(grep { /\bpg_?tle\b/ } @kept), 0, 'and leaves pg_tle out');
open(my $fh, '>', "$tmp/list") or die "cannot write $tmp/list: $!";
print $fh join("\n", @kept), "\n";
close $fh;
$dst->command_ok(
	[ 'pg_restore', '--exit-on-error', '-L', "$tmp/list", '-d', $dst->connstr('app'), "$tmp/app.dump" ],
	'pg_restore into the C edition');

is($dst->safe_psql('app', q{
	SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
	 WHERE p.oid = 'idem_claim(text,text,interval,text)'::regprocedure}),
	'c', 'the target runs the C edition');
foreach my $what (sort keys %q)
{
	is($dst->safe_psql('app', $q{$what}), $before{$what}, "$what restored as they were");
}

# --- and it continues ----------------------------------------------------------
is($dst->safe_psql('app', q{SELECT idem_claim('pay', 'evt-1')}), 'f', 'a claim stays a duplicate');
is($dst->safe_psql('app', q{SELECT outcome || ' ' || result FROM idem_begin('pay', 'evt-2')}),
	'completed {"ok": 2}', 'a result replays');
is($dst->safe_psql('app', q{SELECT string_agg(key || '=' || claimed, ' ' ORDER BY key) FROM idem_claim_many('batch', ARRAY['b1', 'b2', 'b3'])}),
	'b1=false b2=false b3=true', 'a batch sees the records claimed before the dump');
is($dst->safe_psql('app', qq{SELECT outcome FROM idem_begin('gw', 'charge-1', '1 hour')}),
	'in_progress', 'the lease begun before the dump is still held');
$dst->safe_psql('app', qq{SELECT idem_heartbeat('gw', 'charge-1', $lease_token, '1 hour')});
$dst->safe_psql('app', qq{SELECT idem_finish('gw', 'charge-1', $lease_token, '{"charged": true}')});
is($dst->safe_psql('app', q{SELECT outcome || ' ' || result FROM idem_begin('gw', 'charge-1')}),
	'completed {"charged": true}', 'and finishes with its fencing token');
my $new_token = $dst->safe_psql('app', q{SELECT token FROM idem_begin('gw', 'charge-2')});
ok($new_token > $max_token, "a new fencing token ($new_token) is greater than any before the dump ($max_token)");
is($dst->safe_psql('app', q{SELECT idem_token_consume('form', token) FROM issued}),
	't', 'a one-time token issued before the dump is used once');
is($dst->safe_psql('app', q{SELECT idem_token_consume('form', token) FROM issued}),
	'f', 'and only once');
is($dst->safe_psql('app', q{SELECT idem_can_transition('order', 'paid', 'shipped')}),
	't', 'the machine answers');

my ($ret, $out, $err) = $dst->psql('app', q{UPDATE orders SET status = 'pending_payment' WHERE id = 1});
isnt($ret, 0, 'the guard refuses a backward move');
like($err, qr/guarded update of public\.orders: illegal transition from "paid" to "pending_payment"/,
	'with the C edition\'s message');
($ret, $out, $err) = $dst->psql('app', q{INSERT INTO orders (id, status) VALUES (3, 'shipped')});
like($err, qr/illegal initial state "shipped"/, 'and an illegal initial state');
$dst->safe_psql('app', q{UPDATE orders SET status = 'shipped' WHERE id = 1});
is($dst->safe_psql('app', q{SELECT status || ' ' || version FROM orders WHERE id = 1}),
	'shipped 2', 'a legal move bumps the version');
is($dst->safe_psql('app', q{SELECT count(*) FROM idem_transition_log WHERE to_state = 'shipped'}),
	'1', 'history goes on');
($ret, $out, $err) = $dst->psql('app', q{SELECT idem_machine_drop('order')});
like($err, qr/machine "order" is used by guards/, 'the restored guard counts for idem_machine_drop (a real guard)');
$dst->safe_psql('app', q{SELECT idem_unguard('orders', 'status')});
is($dst->safe_psql('app', q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass}),
	'0', 'and idem_unguard removes it');

$src->stop;
$dst->stop;
done_testing();
