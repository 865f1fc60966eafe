# Citus: guards on a distributed table (docs/citus.md, "State machines on
# distributed tables").  idem_guard puts its triggers on every shard; they
# read the machine from this node's placement of the reference table
# idem_machines, bump the version on the shard and write the history into
# a table co-located with the guarded one.  A redefinition on the
# coordinator reaches the shards' cached machines; idem_unguard removes the
# triggers from every shard; after a third worker and a rebalance the moved
# shards are still guarded.  Skipped when citus.so is not installed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemCitus;

IdemCitus::skip_unless_citus();

my $c = IdemCitus->new(workers => 2);
my ($coord, $w1, $w2) = $c->nodes;

sub cq { return $c->cq($_[0]); }

# psql with verbose errors: (exit code, stderr).
sub try_on
{
	my ($node, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return ($ret, $err);
}

# Guard triggers on the shards of $table held by $node (shards are hidden
# from pg_class unless citus.override_table_visibility is off).
sub shard_triggers
{
	my ($node, $table) = @_;
	return $node->safe_psql('postgres',
		"SET citus.override_table_visibility = off;
		 SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relname ~ '^${table}_[0-9]+\$' AND t.tgname LIKE 'idem\\_guard\\_%'");
}

# The node holding the shard of orders for id, and that shard.
sub orders_shard { return $c->shard_of('orders', $_[0]); }
sub history_shard { return $c->shard_of('orders_transitions', $_[0]); }

# ------------------------------------------------------------------ setup
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid", "cancelled"], "paid": ["shipped"]}}')});
cq('SELECT idem_distribute()');
cq(q{CREATE TABLE orders (
    id      bigint PRIMARY KEY,
    status  text NOT NULL DEFAULT 'new',
    version int NOT NULL DEFAULT 0,
    note    text);
SELECT create_distributed_table('orders', 'id')});

# A plpgsql helper that runs a statement and answers 'ok' or its SQLSTATE
# (for background sessions, which must not fail).
cq(q{CREATE FUNCTION try_sql(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$});

# ------------------------------------------------------------- idem_guard
cq(q{SELECT idem_guard('orders', 'status', 'order', version_column => 'version', history => true)});
pass('idem_guard on a distributed table');
is(cq("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'orders'::regclass"), '4', 'four shards');
is(shard_triggers($w1, 'orders') + shard_triggers($w2, 'orders'), 20,
	'five guard triggers (check, insert, version, log, lognew) on each of the four shards');
is( cq("SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	WHERE logicalrelid IN ('orders'::regclass, 'orders_transitions'::regclass)"),
	'1', 'its history table orders_transitions is co-located with orders');
is(cq("SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition WHERE logicalrelid = 'orders_transitions'::regclass"),
	'id', 'and distributed by the same column');
is(cq("SELECT has_table_privilege('public', 'orders_transitions', 'INSERT')"), 'f',
	'the history table is not writable by PUBLIC');
cq(q{SELECT idem_guard('orders', 'status', 'order', version_column => 'version', history => true)});
pass('idem_guard again replaces the guard (and reuses the history table)');
is(shard_triggers($w1, 'orders') + shard_triggers($w2, 'orders'), 20, 'still five triggers per shard');

# ------------------------------------------------- through the coordinator
cq("INSERT INTO orders (id) SELECT g FROM generate_series(1, 8) g");
is(cq('SELECT count(*) FROM orders'), '8', 'inserts in the initial state pass');
my ($ret, $out, $err);
($ret, $err) = try_on($coord, "INSERT INTO orders (id, status) VALUES (100, 'paid')");
isnt($ret, 0, 'an insert in a non-initial state is rejected');
like($err, qr/ID004: guarded insert into public\.orders: illegal initial state "paid"/,
	'with ID004, naming the distributed table (not the shard)');
is(cq('SELECT count(*) FROM orders WHERE id = 100'), '0', 'nothing was inserted');

cq("UPDATE orders SET status = 'paid' WHERE id = 1");
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 1}), 'paid:1',
	'a legal transition passes, the version is bumped on the shard');
($ret, $err) = try_on($coord, "UPDATE orders SET status = 'new' WHERE id = 1");
isnt($ret, 0, 'an illegal transition is rejected');
like($err, qr/ID004: guarded update of public\.orders: illegal transition from "paid" to "new"/,
	'with ID004');
like($err, qr/HINT:  .*"shipped"/, 'and a hint naming the allowed targets');
($ret, $err) = try_on($coord, "UPDATE orders SET status = 'shipped'");
isnt($ret, 0, 'a multi-shard update with one illegal row is rejected');
like($err, qr/ID004/, 'with ID004');
is(cq("SELECT count(*) FROM orders WHERE status = 'shipped'"), '0', 'and rolled back on every shard');
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 1}), 'paid:1', 'the row is unchanged');
cq("UPDATE orders SET note = 'x' WHERE id = 1");
is(cq('SELECT version FROM orders WHERE id = 1'), '1', 'an update of another column keeps the version');

# COPY through the coordinator is checked on the shards too.
cq("COPY orders (id) FROM STDIN;\n200\n201\n\\.\n");
is(cq('SELECT count(*) FROM orders_transitions WHERE id IN (200, 201)'), '2',
	'COPY in the initial state passes, with history');
($ret, $err) = try_on($coord, "COPY orders (id, status) FROM STDIN;\n202\tnew\n203\tpaid\n\\.\n");
# Citus's COPY passes on the shard's message and detail, not its SQLSTATE
# (ReportCopyError raises XX000).
like($err, qr/XX000: guarded insert into public\.orders: illegal initial state "paid"/,
	"COPY of a row in a non-initial state is rejected (the guard's message; Citus's COPY reports XX000)");
is(cq('SELECT count(*) FROM orders WHERE id IN (202, 203)'), '0', 'and the whole COPY rolled back');

# ----------------------------------------------------------- plain SQL forms
($ret, $err) = try_on($coord, "UPDATE orders SET status = idem_transition('order', status, 'shipped') WHERE id = 1");
like($err, qr/STABLE functions used in UPDATE queries cannot be called with column references/,
	'the single-node idem_transition form is refused by Citus');
($ret, $err) = try_on($coord, "UPDATE orders SET status = 'shipped' WHERE id = 1 AND idem_can_transition('order', status, 'shipped')");
like($err, qr/STABLE functions used in UPDATE queries cannot be called with column references/,
	'so is the idem_can_transition form');
is(cq("SELECT idem_sources('order', 'shipped')::text"), '{paid}', 'idem_sources lists the sources');
is(cq("SELECT idem_sources('order', 'cancelled')::text || idem_sources('order', 'new')::text"),
	'{new}{}', 'and is empty for a state no transition enters');
is($coord->psql('postgres', "UPDATE orders SET status = 'shipped' WHERE id = 1 AND status = ANY (idem_sources('order', 'shipped'))"),
	0, 'the idem_sources form passes through Citus');
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 1}), 'shipped:2', 'and moves a row where the move is legal');
my $n = $coord->safe_psql('postgres',
	"WITH u AS (UPDATE orders SET status = 'shipped' WHERE id = 2 AND status = ANY (idem_sources('order', 'shipped')) RETURNING 1) SELECT count(*) FROM u");
is($n, '0', 'and is a no-op where it is not (id 2 is new)');
$n = $coord->safe_psql('postgres',
	"WITH u AS (UPDATE orders SET status = 'cancelled' WHERE id IN (1, 3, 4) AND status = ANY (idem_sources('order', 'cancelled')) RETURNING id) SELECT string_agg(id::text, ',' ORDER BY id) FROM u");
is($n, '3,4', 'across shards: only the rows whose move is legal');

# ----------------------------------------------------------------- history
my $hs = history_shard(1);
is($c->node_of($hs)->port, $c->node_of(orders_shard(1))->port,
	"the history of row 1 is on the worker of the row's shard");
is($c->shard_rows('orders_transitions', $hs, 'id = 1'), '3', 'in the co-located shard: three changes');
is( cq("SELECT string_agg(coalesce(from_state, '-') || '>' || to_state, ',' ORDER BY logged_at)
	FROM orders_transitions WHERE id = 1"),
	'->new,new>paid,paid>shipped', 'in order: insert, paid, shipped (the rejected changes left none)');
is(cq("SELECT DISTINCT table_name || ':' || status_column || ':' || row_key::text FROM orders_transitions WHERE id = 1"),
	'public.orders:status:{"id": 1}', 'naming the distributed table, the column and the primary key');
is(cq("SELECT count(*) FROM orders_transitions WHERE xact_id IS NULL OR changed_at > logged_at"), '0',
	'with a transaction id, changed_at (transaction start) and logged_at (the clock)');
is(cq('SELECT count(*) FROM idem_transition_log'), '0', 'idem_transition_log is not used');
is($c->node_of($hs)->safe_psql('postgres', 'SELECT count(*) FROM idem_transition_log'), '0',
	"nor the worker's");

# ---------------------------------------------------------------- on a worker
my $wo = $c->node_of(orders_shard(5));
my $other = $wo->port == $w1->port ? $w2 : $w1;
for my $w ($wo, $other)
{
	my $p = $w->port;
	($ret, $err) = try_on($w, "UPDATE orders SET status = 'shipped' WHERE id = 5");
	like($err, qr/ID004: guarded update of public\.orders: illegal transition from "new" to "shipped"/,
		"an illegal update run on a worker is rejected (port $p)");
}
$other->safe_psql('postgres', "UPDATE orders SET status = 'paid' WHERE id = 5");
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 5}), 'paid:1',
	'a legal update run on the other worker passes, the version is bumped');
$wo->safe_psql('postgres', "UPDATE orders SET status = 'shipped' WHERE id = 5");
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 5}), 'shipped:2',
	"and one run on the shard's own worker (local execution)");
is($c->shard_rows('orders_transitions', history_shard(5), 'id = 5'), '3',
	'both wrote their history into the co-located shard');

# ------------------------------------------------------ an application role
# A writer needs INSERT on the history table (Citus passes the grant to
# the shards); the machine is read from the placement without a privilege.
cq(q{CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA public TO app;
GRANT SELECT, INSERT, UPDATE ON orders TO app});
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nUPDATE orders SET status = 'paid' WHERE id = 2",
	extra_params => [ '-U', 'app' ]);
like($err, qr/42501: permission denied for table orders_transitions/,
	'a writer without INSERT on the history table is refused (42501)');
cq('GRANT INSERT ON orders_transitions TO app');
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nUPDATE orders SET status = 'paid' WHERE id = 2",
	extra_params => [ '-U', 'app' ]);
is($ret, 0, 'with it, the application role moves the row') or diag($err);
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nUPDATE orders SET status = 'new' WHERE id = 2",
	extra_params => [ '-U', 'app' ]);
like($err, qr/ID004/, 'and is refused an illegal move');
is(cq("SELECT count(*) FROM orders_transitions WHERE id = 2"), '2', 'its change is in the history');

# A known limit (docs/citus.md): the machine is read from this node's
# placement, so a definition made earlier in the same transaction is seen
# only when Citus wrote that placement in this session (local execution,
# the default), not with citus.enable_local_execution off.
is( cq(q{BEGIN;
SELECT 'defined' FROM idem_machine_define('tmpm', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
SELECT idem_can_transition('tmpm', 'a', 'b');
ROLLBACK}), "defined\nt", 'a machine defined earlier in the transaction is seen (local execution)');
($ret, $err) = try_on($coord, q{BEGIN;
SET LOCAL citus.enable_local_execution = off;
SELECT idem_machine_define('tmpm', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
SELECT idem_can_transition('tmpm', 'a', 'b');
ROLLBACK});
like($err, qr/42704: idem_can_transition: machine "tmpm" does not exist/,
	'but not with citus.enable_local_execution off (42704 until commit)');

# ------------------------------------------------------------ redefinition
# A coordinator session whose worker connection has the machine cached, and
# a session on a worker, see a redefinition made on the coordinator.
my $cs = $coord->background_psql('postgres');
my $ws = $w1->background_psql('postgres');
like($cs->query_safe("SELECT try_sql('UPDATE orders SET status = ''shipped'' WHERE id = 6')"),
	qr/^ID004/, 'new -> shipped is illegal (coordinator session, machine cached on the shard)');
like($ws->query_safe("SELECT try_sql('UPDATE orders SET status = ''shipped'' WHERE id = 7')"),
	qr/^ID004/, 'new -> shipped is illegal (worker session)');
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid", "cancelled", "shipped"], "paid": ["shipped"]}}')});
like($cs->query_safe("SELECT try_sql('UPDATE orders SET status = ''shipped'' WHERE id = 6')"),
	qr/^ok/, 'after the redefinition the same coordinator session may move it');
like($ws->query_safe("SELECT try_sql('UPDATE orders SET status = ''shipped'' WHERE id = 7')"),
	qr/^ok/, 'and the worker session too');
$_->quit for ($cs, $ws);
is(cq("SELECT string_agg(status, ',' ORDER BY id) FROM orders WHERE id IN (6, 7)"), 'shipped,shipped',
	'both rows moved');

# ------------------------------------------------ refusals on Citus tables
cq(q{CREATE TABLE carriers (id text PRIMARY KEY, status text NOT NULL);
SELECT create_reference_table('carriers')});
($ret, $err) = try_on($coord, "SELECT idem_guard('carriers', 'status', 'order')");
like($err, qr/0A000: idem_guard: table public\.carriers is a Citus table that is not hash-distributed/,
	'a reference table is refused with 0A000');
cq(q{CREATE TABLE tickets (status text PRIMARY KEY, n int);
SELECT create_distributed_table('tickets', 'status', colocate_with => 'none')});
($ret, $err) = try_on($coord, "SELECT idem_guard('tickets', 'status', 'order')");
like($err, qr/0A000: idem_guard: column "status" is the distribution column of public\.tickets/,
	'the distribution column cannot be the status column');

# A table guarded with history before it was distributed: Citus copies the
# triggers to the shards (citus.enable_unsafe_triggers), where the history
# could only go to the node's own idem_transition_log: refused; idem_guard
# on the distributed table then gives it a co-located history.
cq(q{CREATE TABLE legacy (id bigint PRIMARY KEY, status text NOT NULL);
SELECT idem_guard('legacy', 'status', 'order', history => true);
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('legacy', 'id')});
($ret, $err) = try_on($coord, "INSERT INTO legacy VALUES (1, 'new')");
like($err, qr/0A000: guarded insert into public\.legacy: this guard writes its history to idem_transition_log, which is not co-located with the shard/,
	'a guard with history made before distributing is refused on the shard (0A000)');
like($err, qr/HINT:  Install the guard again with idem_guard\(\) on the distributed table/, 'with a hint');
cq(q{SELECT idem_guard('legacy', 'status', 'order', history => true)});
cq("INSERT INTO legacy VALUES (1, 'new')");
is(cq('SELECT count(*) FROM legacy_transitions WHERE id = 1'), '1',
	'after idem_guard again, the history goes to the co-located legacy_transitions');

# Everything in one transaction: create, distribute, guard, write.
cq(q{BEGIN;
CREATE TABLE quick (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'new', version int NOT NULL DEFAULT 0);
SELECT create_distributed_table('quick', 'id');
SELECT idem_guard('quick', 'status', 'order', version_column => 'version');
INSERT INTO quick (id) SELECT g FROM generate_series(1, 10) g;
UPDATE quick SET status = 'paid';
COMMIT});
is(cq(q{SELECT count(*) || ':' || sum(version) FROM quick WHERE status = 'paid'}), '10:10',
	'a table created, distributed, guarded and written in one transaction');
($ret, $err) = try_on($coord, q{BEGIN;
UPDATE quick SET status = 'new' WHERE id = 1});
like($err, qr/ID004/, 'and guarded');
# With history, the history table is known to a worker's backend only once
# the transaction that created it commits, unless Citus reuses the
# connection that created it: a write in that transaction either works
# (history written) or is refused with 55000 and a hint, never unlogged.
($ret, $err) = try_on($coord, q{BEGIN;
SELECT idem_guard('quick', 'status', 'order', version_column => 'version', history => true);
UPDATE quick SET status = 'shipped' WHERE id = 1;
COMMIT});
if ($err =~ /ERROR/)
{
	like($err, qr/55000: guarded update of public\.quick: history table public\.quick_transitions does not exist on this node/,
		'a write with history in the transaction that created the history table: refused (55000)');
	like($err, qr/HINT:  Commit the transaction that called idem_guard before writing the table/, 'with a hint');
	is(cq('SELECT status FROM quick WHERE id = 1'), 'paid', 'and rolled back');
}
else
{
	pass('a write with history in the transaction that created the history table: it worked');
	is(cq("SELECT count(*) FROM quick_transitions WHERE id = 1 AND to_state = 'shipped'"), '1',
		'with its history');
	is(cq('SELECT status FROM quick WHERE id = 1'), 'shipped', 'and its change');
}
cq(q{SELECT idem_guard('quick', 'status', 'order', version_column => 'version', history => true)});
cq(q{UPDATE quick SET status = 'shipped'});
is(cq("SELECT count(*) FROM quick_transitions WHERE to_state = 'shipped'"), '10',
	'after its commit, the history is written');

# A guarded table co-located with idem_records (a text COLLATE "C" key):
# the history table takes the collation too, so it can be co-located; a
# claim, the guarded insert and update and their history are on one shard.
cq(q{CREATE TABLE payments (key text COLLATE "C" PRIMARY KEY, status text NOT NULL DEFAULT 'new');
SELECT create_distributed_table('payments', 'key', colocate_with => 'idem_records');
SELECT idem_guard('payments', 'status', 'order', history => true)});
is( cq("SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	WHERE logicalrelid IN ('payments'::regclass, 'payments_transitions'::regclass, 'idem_records'::regclass)"),
	'1', 'a text-keyed guarded table, its history and idem_records are co-located');
cq(q{BEGIN;
SELECT idem_claim('payment', 'p-1');
INSERT INTO payments (key) VALUES ('p-1');
UPDATE payments SET status = 'paid' WHERE key = 'p-1';
COMMIT});
my $pshard = $c->shard_of('payments_transitions', 'p-1');
is($c->node_of($pshard)->port, $c->node_of($c->shard_of('idem_records', 'p-1'))->port,
	'the claim and the history of its row are on the same worker');
is($c->shard_rows('payments_transitions', $pshard, "key = 'p-1'"), '2', 'two changes in the history shard');

# idem_machine_drop sees the guards of distributed tables (their triggers
# on the coordinator's shell tables) and refuses.
($ret, $err) = try_on($coord, "SELECT idem_machine_drop('order')");
like($err, qr/2BP01: idem_machine_drop: machine "order" is used by guards.*column "status" of table public\.orders,/s,
	'idem_machine_drop refuses a machine that guards a distributed table');
unlike($err, qr/orders_\d+/, 'and names the distributed table, not its shards');

# ------------------------------------------------------------ idem_unguard
cq("SELECT idem_unguard('orders', 'status')");
is(shard_triggers($w1, 'orders') + shard_triggers($w2, 'orders'), 0,
	'idem_unguard removes the triggers from every shard');
cq("UPDATE orders SET status = 'bogus' WHERE id = 8");
is(cq(q{SELECT status || ':' || version FROM orders WHERE id = 8}), 'bogus:0', 'the table is unguarded');
cq("UPDATE orders SET status = 'new' WHERE id = 8");
cq(q{SELECT idem_guard('orders', 'status', 'order', version_column => 'version', history => true)});

# ------------------------------------------------- a third worker, rebalance
my $w3 = $c->add_worker;
($ret, $out, $err) = $coord->psql('postgres',
	"SELECT rebalance_table_shards(shard_transfer_mode => 'block_writes')");
is($ret, 0, 'rebalance_table_shards after adding a third worker') or diag($err);
# The moved shards' old placements are dropped by Citus's cleanup.
cq('CALL citus_cleanup_orphaned_resources()');
cmp_ok(shard_triggers($w3, 'orders'), '>', 0, 'shards moved to the new worker carry the guard triggers');
is(shard_triggers($w1, 'orders') + shard_triggers($w2, 'orders') + shard_triggers($w3, 'orders'), 20,
	'still five triggers on each of the four shards');
my $moved;
for my $id (10 .. 400)
{
	if ($c->node_of(orders_shard($id))->port == $w3->port)
	{
		$moved = $id;
		last;
	}
}
ok(defined $moved, "an id on a moved shard ($moved)");
is($c->node_of(history_shard($moved))->port, $w3->port, 'its history shard moved with it');
cq("INSERT INTO orders (id) VALUES ($moved)");
cq("UPDATE orders SET status = 'paid' WHERE id = $moved");
is(cq("SELECT status || ':' || version FROM orders WHERE id = $moved"), 'paid:1',
	'a legal transition on a moved shard passes and bumps the version');
($ret, $err) = try_on($coord, "UPDATE orders SET status = 'new' WHERE id = $moved");
like($err, qr/ID004: guarded update of public\.orders: illegal transition from "paid" to "new"/,
	'an illegal one is rejected with ID004');
($ret, $err) = try_on($coord, "INSERT INTO orders (id, status) VALUES ($moved + 1000000, 'paid')");
like($err, qr/ID004/, 'inserts are checked after the rebalance too');
is($c->shard_rows('orders_transitions', history_shard($moved), "id = $moved"), '2',
	"the history is written on the moved shard's worker");
is(cq("SELECT count(*) FROM orders_transitions WHERE id = 1"), '3', 'older history moved along');

$_->stop for $c->nodes;
done_testing();
