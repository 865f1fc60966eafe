# Citus: a local cluster (coordinator and two workers on three ports), the
# extension's tables made Citus tables with idem_distribute(), and what
# holds through the coordinator with idem_records distributed by key
# (docs/citus.md).  Skipped when citus.so is not installed (test/scripts/citus.sh
# builds it for PostgreSQL 15-17).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemCitus;

IdemCitus::skip_unless_citus();

# ---------------------------------------------------------------- cluster
my $c = IdemCitus->new(workers => 2);
my ($coord, $w1, $w2) = $c->nodes;
is($coord->safe_psql('postgres', 'SELECT count(*) FROM citus_get_active_worker_nodes()'),
	'2', 'two workers joined');

sub cq { return $c->cq($_[0]); }
sub shard_of { return $c->shard_of('idem_records', $_[0]); }
sub node_of { return $c->node_of($_[0]); }
sub shard_rows { return $c->shard_rows(@_); }
sub keys_on_two_workers { return $c->values_on_two_workers('idem_records', $_[0]); }

# ----------------------------------------------------- idem_distribute()
# Without the citus extension in the database: a clear error.
$coord->safe_psql('postgres', 'CREATE DATABASE plain');
$coord->safe_psql('plain', 'CREATE EXTENSION idempotency');
my ($ret, $out, $err) = $coord->psql('plain',
	'\set VERBOSITY verbose
SELECT idem_distribute()');
isnt($ret, 0, 'idem_distribute without citus fails');
like($err, qr/55000: idem_distribute: the citus extension is not installed in this database/,
	'with SQLSTATE 55000 and a message');
like($err, qr/HINT:  Without Citus .*do not call idem_distribute.*add citus to shared_preload_libraries/, 'and a hint');
$coord->safe_psql('plain', 'CREATE ROLE app LOGIN');
is( $coord->safe_psql('plain',
		"SELECT has_function_privilege('app', 'idem_distribute(regtype, regclass, boolean)', 'EXECUTE')"),
	'f', 'idem_distribute is not executable by PUBLIC');

# A definition made before distributing is copied to every worker.
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": ["shipped"]}}')});
cq('SELECT idem_distribute()');
is( cq("SELECT logicalrelid::text || ':' || partmethod::text FROM pg_dist_partition
	WHERE logicalrelid::text IN ('idem_records', 'idem_machines') ORDER BY 1"),
	"idem_machines:n\nidem_records:h", 'idem_records distributed, idem_machines a reference table');
is(cq("SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition WHERE logicalrelid = 'idem_records'::regclass"),
	'key', 'idem_records is distributed by key');
cq('SELECT idem_distribute()');
pass('idem_distribute a second time does nothing');
for my $w ($w1, $w2)
{
	is($w->safe_psql('postgres', "SELECT count(*) FROM idem_machines WHERE machine = 'order'"),
		'1', 'a worker sees the machine defined before distributing (port ' . $w->port . ')');
}

is( cq("SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
	WHERE s.logicalrelid = 'idem_machines'::regclass AND p.groupid = 0"),
	'1', 'the coordinator holds a placement of idem_machines (its sessions see redefinitions)');

# ------------------------------------------------------ claim, duplicate
is(cq("SELECT idem_claim('pay', 'k1')"), 't', 'claim through the coordinator');
is(cq("SELECT idem_claim('pay', 'k1')"), 'f', 'the duplicate is refused');
is(cq("SELECT count(*) FROM idem_records WHERE scope = 'pay'"), '1', 'one record');
my $shard = shard_of('k1');
isnt(node_of($shard)->port, $coord->port, 'its shard is on a worker');
is(shard_rows('idem_records', $shard, "key = 'k1'"), '1', 'the record is in that shard');
is(cq("SELECT pg_relation_size('idem_records')"), '0',
	"the coordinator's shell table is empty");

# The direct path must decline because the table is a Citus table, not
# because of Citus's truncate trigger: with the trigger gone from the
# catalog (and the relcache entry rebuilt), claims still go through SPI.
cq("BEGIN;
DELETE FROM pg_trigger WHERE tgrelid = 'idem_records'::regclass;
UPDATE pg_class SET relhastriggers = false WHERE oid = 'idem_records'::regclass;
COMMIT");
is(cq("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'idem_records'::regclass"), '0',
	'no trigger left on the shell table');
is(cq("SELECT idem_claim('pay', 'k2')"), 't', 'claim without the trigger');
is(cq("SELECT idem_claim('pay', 'k2')"), 'f', 'its duplicate');
is(cq("SELECT idem_claim('pay', 'k1')"), 'f', 'the earlier key is still a duplicate');
is(shard_rows('idem_records', shard_of('k2'), "key = 'k2'"), '1', 'the record is in its shard');
is(cq("SELECT pg_relation_size('idem_records')"), '0',
	"the shell table is still empty: the direct path declined on purpose");

# --------------------------------------------- co-located business table
cq(q{CREATE TABLE orders (key text COLLATE "C" PRIMARY KEY, amount int NOT NULL);
SELECT create_distributed_table('orders', 'key', colocate_with => 'idem_records')});
is( cq("SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	WHERE logicalrelid IN ('orders'::regclass, 'idem_records'::regclass)"),
	'1', 'orders is co-located with idem_records');
cq("BEGIN; SELECT idem_claim('order', 'o1'); INSERT INTO orders VALUES ('o1', 10); COMMIT");
is(cq("SELECT (SELECT count(*) FROM orders WHERE key = 'o1') || ':' || (SELECT count(*) FROM idem_records WHERE key = 'o1')"),
	'1:1', 'claim and business insert committed together');
my $oshard = cq("SELECT get_shard_id_for_distribution_column('orders', 'o1')");
is(node_of($oshard)->port, node_of(shard_of('o1'))->port, 'on the same worker');
is(shard_rows('orders', $oshard, "key = 'o1'"), '1', 'in the co-located shard');
cq("BEGIN; SELECT idem_claim('order', 'o2'); INSERT INTO orders VALUES ('o2', 20); ROLLBACK");
is(cq("SELECT (SELECT count(*) FROM orders WHERE key = 'o2') || ':' || (SELECT count(*) FROM idem_records WHERE key = 'o2')"),
	'0:0', 'a rollback undoes both');
is(cq("SELECT idem_claim('order', 'o2')"), 't', 'the key can be claimed again');
# A write to a shard on the other worker in the same transaction: Citus's 2PC.
my ($ka, $kb) = keys_on_two_workers('x');
cq("BEGIN; SELECT idem_claim('order', '$ka'); INSERT INTO orders VALUES ('$kb', 1); COMMIT");
is(cq("SELECT (SELECT count(*) FROM orders WHERE key = '$kb') || ':' || (SELECT count(*) FROM idem_records WHERE key = '$ka')"),
	'1:1', 'a claim and an insert on another worker commit together (2PC)');
cq("BEGIN; SELECT idem_claim('order', '$kb'); INSERT INTO orders VALUES ('$ka', 1); ROLLBACK");
is(cq("SELECT (SELECT count(*) FROM orders WHERE key = '$ka') || ':' || (SELECT count(*) FROM idem_records WHERE key = '$kb')"),
	'0:0', 'and roll back together');

# ------------------------------------------------ two sessions, one key
# The second claimer waits on the worker (a lock wait on the shard) and
# then sees the first one's outcome.  The first claims inside a
# transaction block (statements routed from the coordinator); the second
# outside one, so Citus delegates the call to the worker, where the fast
# path waits for the first in the shard's primary key.
sub race
{
	my ($key, $end) = @_;
	my $a = $coord->background_psql('postgres');
	my $b = $coord->background_psql('postgres');
	my $first = $a->query_safe("BEGIN; SELECT idem_claim('race', '$key');");
	$b->query_until(qr/waiting/, "\\echo waiting\nSELECT 'second:' || idem_claim('race', '$key');\n");
	my $owner = node_of(shard_of($key));
	ok( $owner->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
		   AND (query LIKE '%idem_records%' OR query LIKE '%idem_claim(%')"),
		"the second claim of $key waits on the shard's worker");
	$a->query_safe("$end;");
	my $second = $b->query_safe("SELECT 'after'");
	$a->quit;
	$b->quit;
	return ($first, $second);
}
my ($first, $second) = race('r1', 'COMMIT');
like($first, qr/^t/, 'the first claim is true');
like($second, qr/second:f/, 'after its commit, the second is false');
($first, $second) = race('r2', 'ROLLBACK');
like($second, qr/second:t/, 'after its rollback, the second is true');
is(cq("SELECT count(*) FROM idem_records WHERE scope = 'race'"), '2', 'one record per key');

# ------------------------------------------------ delegated claims
# idem_distribute() made idem_claim a distributed function by its key: a
# call outside a transaction block runs whole on the key's worker, and
# there the fast path writes into the shard; Citus's local execution of
# the claim's SQL (logged by citus.log_local_commands) is not used.
is( cq(q{SELECT string_agg(objid::regprocedure::text || ':' || distribution_argument_index, ', ' ORDER BY distribution_argument_index)
	FROM pg_dist_object WHERE objid IN ('idem_claim(text,text,interval,text)'::regprocedure, 'idem_claim(text)'::regprocedure)}),
	'idem_claim(text):0, idem_claim(text,text,interval,text):1',
	'idem_claim is a distributed function by its key');
for my $w ($w1, $w2)
{
	$w->safe_psql('postgres', 'ALTER SYSTEM SET citus.log_local_commands = on; SELECT pg_reload_conf()');
}
# The worker's notices reach the client through the coordinator.
sub claim_logs_local_sql
{
	my ($key) = @_;
	my ($ret, $got, $err) = $coord->psql('postgres', "SELECT idem_claim('dlg', '$key')");
	return ($got, scalar($err =~ /executing the command locally: INSERT INTO public\.idem_records/));
}
my ($got, $local_sql) = claim_logs_local_sql('d1');
is($got, 't', 'a delegated claim');
# The fast path on a shard calls three functions of citus.so, which Citus
# built with PGXS for PostgreSQL 16 and later hides (-fvisibility=hidden):
# there it declines, and the claim runs its SQL through Citus
# (src/claim_citus_local.c; docs/citus.md).
if ($coord->safe_psql('postgres', 'SHOW server_version_num') < 160000)
{
	ok(!$local_sql, 'written by the fast path into the shard, without local execution of SQL');
}
else
{
	ok($local_sql, 'PostgreSQL 16 and later: Citus hides the functions of the fast path, the INSERT runs through local execution');
}
is(cq("SELECT idem_claim('dlg', 'd1')"), 'f', 'its duplicate is refused');
is(shard_rows('idem_records', shard_of('d1'), "scope = 'dlg' AND key = 'd1'"), '1',
	"the record is in the key's shard");
# With the fast path off on the workers the same call runs its SQL there.
for my $w ($w1, $w2)
{
	$w->safe_psql('postgres', 'ALTER SYSTEM SET idempotency.direct_claim = off; SELECT pg_reload_conf()');
}
($got, $local_sql) = claim_logs_local_sql('d2');
is($got, 't', 'a delegated claim without the fast path');
ok($local_sql, 'runs its INSERT through Citus local execution');
for my $w ($w1, $w2)
{
	$w->safe_psql('postgres',
		'ALTER SYSTEM RESET idempotency.direct_claim; ALTER SYSTEM RESET citus.log_local_commands; SELECT pg_reload_conf()');
}
is(cq("SELECT idem_claim('dlg', 'd2')"), 'f', 'the fast path sees that record as a duplicate');

# ------------------------------------------------ complete, lookup, replay
cq(q{SELECT idem_claim('pay', 'c1'); SELECT idem_complete('pay', 'c1', '{"receipt": 7}')});
is(cq("SELECT status || ':' || result::text FROM idem_lookup('pay', 'c1')"),
	'completed:{"receipt": 7}', 'idem_lookup replays the stored result');
is(cq("SELECT idem_claim('pay', 'c1')"), 'f', 'a completed key is a duplicate');
is(cq("SELECT idem_release('pay', 'c1')"), 't', 'idem_release deletes the record');
is(cq("SELECT idem_claim('pay', 'c1')"), 't', 'and the key can be claimed again');

# ------------------------------------------------ leases and tokens
my @tokens;
for my $k (qw(t1 t2 t3 t4 t5 t6))
{
	push @tokens, cq("SELECT token FROM idem_begin('lease', '$k')");
}
like($_, qr/^\d+$/, "idem_begin gave a token ($_)") for @tokens;
is(join(',', @tokens), join(',', sort { $a <=> $b } @tokens),
	'tokens increase across shards (nextval evaluated on the coordinator)');
is(cq("SELECT outcome FROM idem_begin('lease', 't1')"), 'in_progress',
	'a second idem_begin sees the live lease');
cq("SELECT idem_finish('lease', 't1', $tokens[0], '{\"ok\": true}')");
is(cq("SELECT status FROM idem_lookup('lease', 't1')"), 'completed', 'idem_finish completes it');
($ret, $out, $err) = $coord->psql('postgres',
	"SELECT idem_finish('lease', 't2', $tokens[0] - 1, '{}')");
isnt($ret, 0, 'idem_finish with a stale token is refused');
is(cq("SELECT status FROM idem_lookup('lease', 't2')"), 'in_progress', 'the lease is untouched');

# A takeover issues a fresh token: its UPDATE's nextval is evaluated on
# the coordinator too.
cq("SELECT idem_fail('lease', 't2', $tokens[1], '{}', retryable => true)");
my $t2 = cq("SELECT token FROM idem_begin('lease', 't2')");
cmp_ok($t2, '>', $tokens[-1], 'a takeover gets a token above every earlier one');

# On a worker, idem_begin would draw from the worker's own idem_token_seq
# (token 1 here, below every token above): refused.
($ret, $out, $err) = $w1->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT token FROM idem_begin('lease', 'w1')");
isnt($ret, 0, 'idem_begin on a worker fails');
like($err, qr/0A000: idem_begin: fencing tokens are issued on the Citus coordinator only/,
	'with 0A000 and a clear message');
like($err, qr/HINT:  Call idem_begin through the coordinator/, 'and a hint');
is(cq("SELECT count(*) FROM idem_records WHERE key = 'w1'"), '0', 'nothing was written');

# An expired claim is taken over through the coordinator.
cq("SELECT idem_claim('ttl', 'e1', ttl => '1 millisecond')");
select(undef, undef, undef, 0.05);
is(cq("SELECT idem_claim('ttl', 'e1')"), 't', 'an expired claim is taken over');
is(cq("SELECT idem_claim('ttl', 'e1')"), 'f', 'and is then a duplicate');

# ------------------------------------------------ one-time tokens
my $ot = cq("SELECT idem_token_issue('otp')");
like($ot, qr/^[0-9a-f]{32}$/, 'idem_token_issue through the coordinator');
is(cq("SELECT idem_token_consume('otp', '$ot')"), 't', 'consumed once');
is(cq("SELECT idem_token_consume('otp', '$ot')"), 'f', 'and only once');

# ------------------------------------------------ a claim on a worker
is($w2->safe_psql('postgres', "SELECT idem_claim('pay', 'on-worker')"), 't',
	'a claim on a worker (routed by Citus)');
is(cq("SELECT idem_claim('pay', 'on-worker')"), 'f', 'is a duplicate on the coordinator');
is($w2->safe_psql('postgres', "SELECT pg_relation_size('idem_records')"), '0',
	"the worker's shell table is empty too");

# ------------------------------------------------ heartbeat, await, summary
my $lt = cq("SELECT token FROM idem_begin('lease', 'aw', lease => '10 minutes')");
like(cq("SELECT idem_heartbeat('lease', 'aw', $lt) > now()"), qr/^t$/,
	'idem_heartbeat extends the lease');
my $waiter = $coord->background_psql('postgres');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT 'await:' || status || ':' || result::text FROM idem_await('lease', 'aw', '1 minute');\n");
ok( $coord->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%idem_await%'"),
	'idem_await waits on the coordinator');
cq("SELECT idem_finish('lease', 'aw', $lt, '{\"r\": 1}')");
like($waiter->query_safe("SELECT 'after'"), qr/await:completed:\{"r": 1\}/,
	'and returns the completed record once the owner finishes');
$waiter->quit;
is( cq("SELECT records || ':' || completed FROM idem_summary() WHERE scope = 'pay'"),
	cq("SELECT count(*) || ':' || count(*) FILTER (WHERE status = 'completed') FROM idem_records WHERE scope = 'pay'"),
	'idem_summary on the coordinator counts the records of every shard');
cmp_ok(cq("SELECT records FROM idem_summary() WHERE scope = 'pay'"), '>=', 3, '(several of them)');

# ------------------------------------------------ pgbench through the coordinator
# 8 clients on 200 overlapping keys: a ledger row (co-located with the
# record) is written only when idem_claim returns true; one transaction in
# twenty rolls back.  No key twice, no record without its ledger row.
cq(q{CREATE TABLE ledger (key text COLLATE "C" NOT NULL, client int NOT NULL);
SELECT create_distributed_table('ledger', 'key', colocate_with => 'idem_records')});
my ($clients, $per_client) = (8, 100);
my $total = $clients * $per_client;
$coord->pgbench(
	"-n -c $clients -j 2 -t $per_client",
	0,
	[
		qr{number of transactions actually processed: $total/$total},
		qr{number of failed transactions: 0 }
	],
	[qr{^$}],
	'pgbench claims through the coordinator',
	{
		'citus_claims' => q{
\set k random(1, 200)
\set fail random(1, 20)
BEGIN;
SELECT idem_claim('bench', 'key-' || :k) AS owned \gset
\if :owned
INSERT INTO ledger VALUES ('key-' || :k, :client_id);
SELECT idem_complete('bench', 'key-' || :k, jsonb_build_object('client', :client_id));
\endif
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
}
	});
my ($credits, $credited, $records, $completed, $unmatched) = split /\|/, cq(q{
	SELECT (SELECT count(*) FROM ledger),
	       (SELECT count(DISTINCT key) FROM ledger),
	       (SELECT count(*) FROM idem_records WHERE scope = 'bench'),
	       (SELECT count(*) FROM idem_records WHERE scope = 'bench' AND status = 'completed'),
	       (SELECT count(*) FROM idem_records r WHERE r.scope = 'bench'
	          AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.key = r.key))});
note "pgbench: credits $credits, keys $credited, records $records";
ok($records > 0 && $records < $total, 'claims overlapped');
is($credits, $credited, 'no key was credited twice');
is($records, $credited, 'every record has its ledger row (nothing lost)');
is($completed, $records, 'every record is completed');
is($unmatched, '0', 'records and ledger rows are the same keys');

# ------------------------------------------------ idem_claim_many
# On distributed records the batch claims its keys one by one, in sorted
# order, each routed to its shard; the answer is that of one node.
my ($m1, $m2) = keys_on_two_workers('m');
is( cq("SELECT string_agg(key || ':' || claimed, ',') FROM idem_claim_many('many0', ARRAY['$m2', '$m1', '$m2'])"),
	"$m2:true,$m1:true,$m2:false", 'idem_claim_many over two workers: one row per element, in array order');
is( cq("SELECT string_agg(key || ':' || claimed, ',') FROM idem_claim_many('many0', ARRAY['$m1', 'mx'])"),
	"$m1:false,mx:true", 'a second batch: the claimed key is a duplicate');
is(shard_rows('idem_records', shard_of($m2), "scope = 'many0' AND key = '$m2'"), '1',
	"each record is in its key's shard");

# Two batches over keys on two workers, in opposite array orders, both
# queued behind a third session that holds the smallest key: no deadlock,
# and exactly one batch claims both keys.
my $holder = $coord->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT idem_claim('many', '$m1');");
my @sessions;
my %order = (s1 => "'$m1', '$m2'", s2 => "'$m2', '$m1'");
for my $s (qw(s1 s2))
{
	my $b = $coord->background_psql('postgres');
	$b->query_until(qr/waiting/,
		"\\echo waiting\nBEGIN; SELECT '$s:' || string_agg(claimed::text, '' ORDER BY key) FROM idem_claim_many('many', ARRAY[$order{$s}]); COMMIT;\n");
	push @sessions, $b;
}
ok( node_of(shard_of($m1))->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idem_records%'"),
	'both batches wait for the smallest key');
$holder->query_safe('ROLLBACK;');
my $both = join ' ', map { $_->query_safe("SELECT 'done'") } @sessions;
like($both, qr/s1:(truetrue|falsefalse)/, 'batch 1 claimed both keys or none');
like($both, qr/s2:(truetrue|falsefalse)/, 'batch 2 claimed both keys or none');
my @claimed = ($both =~ /:truetrue/g);
is(scalar @claimed, 1, 'exactly one batch claimed them');
is(cq("SELECT count(*) FROM idem_records WHERE scope = 'many'"), '2', 'two records');
$_->quit for ($holder, @sessions);

# ------------------------------------------------ machines as reference data
# A redefinition on the coordinator reaches every placement, and the
# compiled copies cached by sessions on the coordinator and on a worker
# are invalidated.
my $cs = $coord->background_psql('postgres');
my $ws = $w1->background_psql('postgres');
for my $b ($cs, $ws)
{
	like($b->query_safe("SELECT idem_can_transition('order', 'new', 'shipped')"),
		qr/^f/, 'new -> shipped is illegal (cached)');
}
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid", "shipped"], "paid": ["shipped"]}}')});
for my $w ($w1, $w2)
{
	like($w->safe_psql('postgres', "SELECT definition::text FROM idem_machines WHERE machine = 'order'"),
		qr/"new": \["paid", "shipped"\]/, 'the worker has the new definition (port ' . $w->port . ')');
}
like($cs->query_safe("SELECT idem_can_transition('order', 'new', 'shipped')"),
	qr/^t/, 'a coordinator session sees the redefinition');
like($ws->query_safe("SELECT idem_can_transition('order', 'new', 'shipped')"),
	qr/^t/, 'a worker session sees the redefinition');
$_->quit for ($cs, $ws);
($ret, $out, $err) = $coord->psql('postgres',
	q{SELECT idem_machine_define('bad', '{}')});
isnt($ret, 0, 'a malformed definition is refused');
($ret, $out, $err) = $coord->psql('postgres',
	q{INSERT INTO idem_machines (machine, definition) VALUES ('bad', '{}')});
isnt($ret, 0, 'also by a direct INSERT (the validation trigger runs on the placements)');
note "direct insert: $err";
is(cq("SELECT count(*) FROM idem_machines WHERE machine = 'bad'"), '0', 'and not stored');
cq("SELECT idem_machine_drop('order')");
is($w2->safe_psql('postgres', "SELECT count(*) FROM idem_machines WHERE machine = 'order'"),
	'0', 'idem_machine_drop reaches the workers');
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": ["shipped"]}}')});

# ------------------------------------------------ purge on every shard
my ($p1, $p2) = keys_on_two_workers('p');
cq("SELECT idem_claim('purge', '$p1', ttl => '1 millisecond'), idem_claim('purge', '$p2', ttl => '1 millisecond'), idem_claim('purge', 'live')");
select(undef, undef, undef, 0.1);
($ret, $out, $err) = $coord->psql('postgres', 'SELECT idem_purge()');
note "idem_purge: $ret $out $err";
is($ret, 0, 'idem_purge from the coordinator runs');
is($out, '2', 'it deleted the two expired records');
is(cq("SELECT string_agg(key, ',') FROM idem_records WHERE scope = 'purge'"), 'live',
	'on both workers; the live record is kept');

# ------------------------------------------------ guards on Citus tables
# A distributed table is guarded on every shard (test/t/021_citus_guard.pl
# tests guards on Citus in full); other Citus tables are refused.
cq(q{CREATE TABLE shipments (id bigint PRIMARY KEY, status text NOT NULL);
SELECT create_distributed_table('shipments', 'id')});
cq("SELECT idem_guard('shipments', 'status', 'order')");
pass('idem_guard on a distributed table');
cq("INSERT INTO shipments VALUES (1, 'new')");
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nUPDATE shipments SET status = 'shipped' WHERE id = 1");
isnt($ret, 0, 'an illegal update through the coordinator fails');
like($err, qr/ID004: guarded update of public.shipments: illegal transition from "new" to "shipped"/,
	'with ID004, raised by the guard on the shard');
cq("UPDATE shipments SET status = 'paid' WHERE id = 1");
is(cq('SELECT status FROM shipments WHERE id = 1'), 'paid', 'a legal one passes');

# A reference table is refused.
cq(q{CREATE TABLE carriers (id text PRIMARY KEY, status text NOT NULL);
SELECT create_reference_table('carriers')});
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT idem_guard('carriers', 'status', 'order')");
like($err, qr/0A000: idem_guard: table public.carriers is a Citus table that is not hash-distributed/,
	'idem_guard on a reference table is refused with 0A000');
like($err, qr/HINT:  Distribute the table with create_distributed_table/, 'and a hint');
is(cq("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'carriers'::regclass AND tgname LIKE 'idem_guard%'"),
	'0', 'no guard trigger was left behind');

# A table guarded before it is distributed: Citus refuses to distribute it
# (its triggers), unless citus.enable_unsafe_triggers is on, which copies
# the guard's triggers to the shards; there they read the machine from the
# node's placement of idem_machines and enforce it.
cq(q{CREATE TABLE parcels (id bigint PRIMARY KEY, status text NOT NULL);
SELECT idem_guard('parcels', 'status', 'order')});
($ret, $out, $err) = $coord->psql('postgres', "SELECT create_distributed_table('parcels', 'id')");
like($err, qr/cannot distribute relation "parcels" because it has triggers/,
	'Citus refuses to distribute a guarded table');
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose
SET citus.enable_unsafe_triggers = on; SELECT create_distributed_table('parcels', 'id');
INSERT INTO parcels VALUES (1, 'new');
UPDATE parcels SET status = 'shipped' WHERE id = 1;");
like($err, qr/ID004: guarded update of public.parcels: illegal transition from "new" to "shipped"/,
	'distributed with unsafe triggers, its guard is enforced on the shards');
is(cq('SELECT status FROM parcels'), 'new', 'the legal insert was written, the illegal update was not');

# ------------------------------------------------ a shard moved under a live session
# A session on the worker that holds a shard claims there through the fast
# path (its cache says the shard is local); the shard is then moved to the
# other worker.  The same session's next claims in that shard must go to
# the new placement, never into the old one (which Citus drops later).
my ($mk) = grep { node_of(shard_of($_))->port == $w1->port } map { "mv$_" } 0 .. 50;
my $mshard = shard_of($mk);
my @mkeys = grep { shard_of($_) == $mshard } map { "mv$_" } 0 .. 200;
my $live = $w1->background_psql('postgres');
like($live->query_safe("BEGIN; SELECT idem_claim('move', '$mkeys[0]'); COMMIT;"), qr/t/,
	'a claim on the worker that holds the shard');
cq("SELECT citus_move_shard_placement($mshard, '127.0.0.1', " . $w1->port . ", '127.0.0.1', "
	  . $w2->port . ", shard_transfer_mode => 'block_writes')");
is(node_of($mshard)->port, $w2->port, 'the shard moved to the other worker');
like($live->query_safe("BEGIN; SELECT idem_claim('move', '$mkeys[1]'); COMMIT;"), qr/t/,
	'the same session claims another key of the moved shard');
like($live->query_safe("BEGIN; SELECT 'dup:' || idem_claim('move', '$mkeys[0]'); COMMIT;"), qr/dup:f/,
	'and sees the first key as a duplicate');
like($live->query_safe("SELECT 'auto:' || idem_claim('move', '$mkeys[2]')"), qr/auto:t/,
	'an autocommit claim too');
$live->quit;
is(cq("SELECT count(*) FROM idem_records WHERE scope = 'move'"), '3', 'three records through the coordinator');
is(shard_rows('idem_records', $mshard, "scope = 'move'"), '3', 'all in the new placement');
is( $w1->safe_psql('postgres',
		"SET citus.override_table_visibility = off; SELECT count(*) FROM pg_class WHERE relname = 'idem_records_$mshard'") eq '0'
	  ? '0'
	  : $w1->safe_psql('postgres',
		"SET citus.override_table_visibility = off; SELECT count(*) FROM idem_records_$mshard WHERE scope = 'move' AND key <> '$mkeys[0]'"),
	'0', 'none written into the old placement');

# A move that starts while a claim written by the fast path is not yet
# committed must wait for it (the fast path holds Citus's shard metadata
# lock, as Citus's own writes do); otherwise the uncommitted record would
# stay behind in the old placement and be lost.
my $holder2 = $w2->background_psql('postgres');
like($holder2->query_safe("BEGIN; SELECT idem_claim('move', '$mkeys[3]');"), qr/t/,
	'a fast-path claim on the shard, not committed yet');
my $mover = $coord->background_psql('postgres');
$mover->query_until(qr/moving/,
	"\\echo moving\nSELECT citus_move_shard_placement($mshard, '127.0.0.1', " . $w2->port
	  . ", '127.0.0.1', " . $w1->port . ", shard_transfer_mode => 'block_writes');\n");
ok( $w2->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND locktype = 'advisory'"),
	"the move waits for the claim's transaction");
$holder2->query_safe('COMMIT;');
$mover->query_safe('SELECT 1');
$_->quit for ($holder2, $mover);
is(node_of($mshard)->port, $w1->port, 'then the shard moved back');
is(shard_rows('idem_records', $mshard, "scope = 'move' AND key = '$mkeys[3]'"), '1',
	'with the record committed meanwhile');
is(cq("SELECT idem_claim('move', '$mkeys[3]')"), 'f', 'which is a duplicate');

$_->stop for $c->nodes;
done_testing();
