# Citus: idem_records distributed by a shard key of the user's type
# (idem_distribute(shard_key => 'bigint', colocate_with => 'orders')), so
# a customer's claims sit on the shard of that customer's orders; the F_at
# twins through the coordinator (docs/citus.md, "Co-location by a business
# key").  Skipped when citus.so is not installed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemCitus;

IdemCitus::skip_unless_citus();

my $c = IdemCitus->new(workers => 2);
my $coord = $c->coord;
sub cq { return $c->cq($_[0]); }

# psql on the coordinator; returns (exit code, stdout, stderr).
sub try_sql
{
	return $coord->psql('postgres', "\\set VERBOSITY verbose\n$_[0]");
}

# ------------------------------------------------ distributing by shard key
cq(q{CREATE TABLE orders (customer_id bigint NOT NULL, id bigint NOT NULL,
	amount numeric NOT NULL, status text NOT NULL DEFAULT 'new',
	version int NOT NULL DEFAULT 0, PRIMARY KEY (customer_id, id));
SELECT create_distributed_table('orders', 'customer_id')});
cq(q{SELECT idem_distribute(shard_key => 'bigint', colocate_with => 'orders')});
is( cq(q{SELECT column_to_column_name(logicalrelid, partkey) || ':' || format_type(a.atttypid, NULL)
	FROM pg_dist_partition p JOIN pg_attribute a ON a.attrelid = p.logicalrelid AND a.attname = 'shard_key'
	WHERE logicalrelid = 'idem_records'::regclass}),
	'shard_key:bigint', 'idem_records is distributed by shard_key bigint');
is( cq(q{SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	WHERE logicalrelid IN ('idem_records'::regclass, 'orders'::regclass)}),
	'1', 'co-located with orders');
for my $n ($c->nodes)
{
	is( $n->safe_psql('postgres',
			q{SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index i
			  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
			  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
			  WHERE i.indexrelid = 'idem_records_pkey'::regclass}),
		'shard_key,scope,key', 'the primary key is (shard_key, scope, key) on port ' . $n->port);
}
cq(q{SELECT idem_distribute(shard_key => 'bigint', colocate_with => 'orders')});
pass('idem_distribute again with the same arguments does nothing');
my ($ret, $out, $err) = try_sql('SELECT idem_distribute()');
like($err, qr/55000: idem_distribute: idem_records is distributed by shard_key already/,
	'another distribution column is refused with 55000');
($ret, $out, $err) = try_sql(q{SELECT idem_distribute(shard_key => 'uuid')});
like($err, qr/55000: idem_distribute: idem_records is distributed by shard_key already/,
	'another shard key type is refused with 55000');

# ------------------------------------------------ a claim next to the order
# The claim and the order are on one shard: one single-shard transaction,
# no two-phase commit.
($ret, $out, $err) = $coord->psql('postgres', q{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
SELECT idem_claim_at(42, 'pay', 'order-1');
INSERT INTO orders VALUES (42, 1, 10.00);
COMMIT;});
is($ret, 0, 'claim and order in one transaction');
is($out, 't', 'the claim is owned');
unlike($err, qr/PREPARE TRANSACTION/, 'no two-phase commit: one shard');
my @servers = ($err =~ /on server \S+@([\d.]+:\d+)/g);
my %servers = map { $_ => 1 } @servers;
is(scalar keys %servers, 1, 'both statements went to one worker');
my $shard = $c->shard_of('orders', 42);
is( $c->node_of($c->shard_of('idem_records', 42))->port,
	$c->node_of($shard)->port, 'the record lives on the worker of the order');
is($c->shard_rows('idem_records', $c->shard_of('idem_records', 42), "shard_key = 42 AND key = 'order-1'"),
	'1', 'in the shard of shard key 42');

is(cq("SELECT idem_claim_at(42, 'pay', 'order-1')"), 'f', 'the duplicate is refused');
is(cq("SELECT idem_claim_at('42', 'pay', 'order-1')"), 'f', 'a text literal converts to bigint');
is(cq("SELECT idem_claim_at(42::int, 'pay', 'order-1')"), 'f', 'an integer converts to bigint');
is(cq("SELECT idem_claim_at(43, 'pay', 'order-1')"), 't',
	'the same key under another shard key is another record (the identity is (shard_key, scope, key))');

cq(q{BEGIN; SELECT idem_claim_at(44, 'pay', 'order-2'); INSERT INTO orders VALUES (44, 2, 5); ROLLBACK;});
is( cq(q{SELECT (SELECT count(*) FROM idem_records WHERE shard_key = 44)
	+ (SELECT count(*) FROM orders WHERE customer_id = 44)}),
	'0', 'a rollback undoes the claim and the order');
is(cq("SELECT idem_claim_at(44, 'pay', 'order-2')"), 't', 'and the key can be claimed again');

# ------------------------------------------------ the other twins
cq(q{SELECT idem_claim_at(42, 'pay', 'order-3', fingerprint => 'v1')});
($ret, $out, $err) = try_sql(q{SELECT idem_claim_at(42, 'pay', 'order-3', fingerprint => 'v2')});
like($err, qr/ID001/, 'a different fingerprint for a live key: ID001');
cq(q{SELECT idem_complete_at(42, 'pay', 'order-3', '{"receipt": 7}')});
is(cq(q{SELECT (idem_lookup_at(42, 'pay', 'order-3')).result->>'receipt'}), '7',
	'idem_lookup_at replays the stored result');
is(cq(q{SELECT idem_lookup_at(43, 'pay', 'order-3') IS NULL}), 't',
	'another shard key does not see it');
is(cq(q{SELECT idem_release_at(43, 'pay', 'order-1')}), 't', 'idem_release_at');
is(cq(q{SELECT count(*) FROM idem_records WHERE shard_key = 43}), '0', 'the record is gone');

my ($outcome, $token) = split /\|/, cq(q{SELECT outcome, token FROM idem_begin_at(7, 'job', 'j1', lease => '1 minute')});
is($outcome, 'acquired', 'idem_begin_at acquires');
is(cq(q{SELECT outcome FROM idem_begin_at(7, 'job', 'j1')}), 'in_progress', 'a second begin sees it in progress');
ok(cq(qq{SELECT idem_heartbeat_at(7, 'job', 'j1', $token) > now()}) eq 't', 'idem_heartbeat_at extends the lease');
cq(qq{SELECT idem_fail_at(7, 'job', 'j1', $token, '{"e": 1}', retryable => true)});
my (undef, $token2) = split /\|/, cq(q{SELECT outcome, token FROM idem_begin_at(7, 'job', 'j1')});
ok($token2 > $token, 'a takeover after a retryable failure gets a greater token');
($ret, $out, $err) = try_sql(qq{SELECT idem_finish_at(7, 'job', 'j1', $token, '{}')});
like($err, qr/ID003/, 'the stale token is refused (ID003)');
cq(qq{SELECT idem_finish_at(7, 'job', 'j1', $token2, '{"done": true}')});
is(cq(q{SELECT status || ':' || (result->>'done') FROM idem_await_at(7, 'job', 'j1', '1 second')}),
	'completed:true', 'idem_await_at returns the completed record');

is(cq(q{SELECT idem_token_consume_at(5, 'form', idem_token_issue_at(5, 'form'))}), 't',
	'a one-time token is consumed');
my $tok = cq(q{SELECT idem_token_issue_at(5, 'form')});
is(cq(qq{SELECT idem_token_consume_at(5, 'form', '$tok')}), 't', 'once');
is(cq(qq{SELECT idem_token_consume_at(5, 'form', '$tok')}), 'f', 'and only once');

is( cq(q{SELECT string_agg(key || ':' || claimed, ',') FROM idem_claim_many_at(9, 'batch', ARRAY['y', 'x', 'y'])}),
	'y:true,x:true,y:false', 'idem_claim_many_at: one row per element');
is( cq(q{SELECT string_agg(key || ':' || claimed, ',') FROM idem_claim_many_at(9, 'batch', ARRAY['x', 'z'])}),
	'x:false,z:true', 'a second batch sees the duplicate');

# ------------------------------------------------ two sessions, one key
for my $end (qw(COMMIT ROLLBACK))
{
	my $k = "race-$end";
	my $holder = $coord->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT idem_claim_at(100, 'race', '$k');");
	my $waiter = $coord->background_psql('postgres');
	$waiter->query_until(qr/waiting/,
		"\\echo waiting\nSELECT 'w:' || idem_claim_at(100, 'race', '$k');\n");
	ok( $c->node_of($c->shard_of('idem_records', 100))->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idem_records%'"),
		"the second session waits for the first ($end)");
	$holder->query_safe("$end;");
	my $got = $waiter->query_safe("SELECT 'done'");
	like($got, $end eq 'COMMIT' ? qr/w:false/ : qr/w:true/,
		$end eq 'COMMIT' ? 'after the commit: a duplicate' : 'after the rollback: the waiter owns it');
	$_->quit for ($holder, $waiter);
}

# ------------------------------------------------ errors
($ret, $out, $err) = try_sql(q{SELECT idem_claim('pay', 'order-1')});
like($err, qr/55000: idem_claim: idem_records is distributed by a shard key/, 'idem_claim without the shard key: 55000');
like($err, qr/HINT:  Call idem_claim_at\(shard_key, scope, key, ttl, fingerprint\) instead/, 'naming its twin');
($ret, $out, $err) = try_sql(q{SELECT idem_lookup('pay', 'order-1')});
like($err, qr/55000: idem_lookup: idem_records is distributed by a shard key/, 'idem_lookup without the shard key: 55000');
like($err, qr/HINT:  Call idem_lookup_at\(shard_key, scope, key\) instead/, 'naming its own twin');
($ret, $out, $err) = try_sql(q{SELECT * FROM idem_claim_many('pay', ARRAY['order-1'])});
like($err, qr/HINT:  Call idem_claim_many_at\(shard_key, scope, keys, ttl\) instead/,
	'idem_claim_many (key by key on Citus) names idem_claim_many_at');
($ret, $out, $err) = try_sql(q{SELECT idem_claim_at(NULL::bigint, 'pay', 'order-1')});
like($err, qr/22004: idem_claim_at: shard_key must not be null/, 'a NULL shard key: 22004');
($ret, $out, $err) = try_sql(q{SELECT idem_claim_at('abc', 'pay', 'order-1')});
like($err, qr/22P02/, 'a shard key bigint does not accept: 22P02');

# ------------------------------------------------ a twin inside a query on a shard
# Citus sends a query on a distributed table, with the twin in it, to the
# node of the shard; there the twin's statements on idem_records would be
# a distributed query inside a query on a shard.  Our 0A000 instead of
# Citus's XX000, with the working shape in the hint (docs/citus.md).
($ret, $out, $err) = try_sql(
	q{SELECT idem_claim_at(customer_id, 'payment', 'p-1') FROM orders WHERE customer_id = 42 AND id = 1});
like($err, qr/0A000: idem_claim_at: cannot run inside a query on a shard of a distributed table/,
	'a twin in a query that Citus sends to a shard: 0A000');
like($err, qr/HINT:  Call idem_claim_at in a statement of its own, .*for example SELECT idem_claim_at\(42, scope, key\);/,
	'the hint shows the working shape');
unlike($err, qr/allow_nested_distributed_execution/, "not Citus's hint");
is(cq(q{SELECT count(*) FROM idem_records WHERE key = 'p-1'}), '0', 'nothing was claimed');
($ret, $out, $err) = $c->node_of($shard)->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT idem_claim_at(customer_id, 'payment', 'p-1') FROM orders WHERE customer_id = 42 AND id = 1");
like($err, qr/0A000: idem_claim_at: cannot run inside a query on a shard/,
	"the same on the shard's worker (Citus's local execution)");
($ret, $out, $err) = try_sql(q{SELECT (idem_lookup_at(customer_id, 'pay', 'order-3')).status FROM orders});
like($err, qr/0A000: idem_lookup_at: cannot run inside a query on a shard.*HINT:  .*SELECT idem_lookup_at\(42, scope, key\)/s,
	'a reading twin across every shard: the same');
($ret, $out, $err) = try_sql(
	q{SELECT idem_token_issue_at(customer_id, 'form') FROM orders WHERE customer_id = 42 AND id = 1});
like($err, qr/HINT:  .*SELECT idem_token_issue_at\(42, scope\);/, "each twin's hint shows its own arguments");
# The shape of the hint: a statement of its own, then the query, in one
# transaction on the shard's worker.
($ret, $out, $err) = $coord->psql('postgres', q{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
SELECT idem_claim_at(42, 'payment', 'p-1');
SELECT id FROM orders WHERE customer_id = 42 AND id = 1;
COMMIT;});
is($out, "t\n1", 'the shape of the hint claims, then reads the order');
unlike($err, qr/PREPARE TRANSACTION/, 'in one single-shard transaction');
@servers = ($err =~ /on server \S+@([\d.]+:\d+)/g);
%servers = map { $_ => 1 } @servers;
is(scalar keys %servers, 1, 'on one worker');

# ------------------------------------------------ purge on every shard
cq(q{SELECT idem_claim_at(s, 'short', 'k', ttl => '1 millisecond') FROM generate_series(1, 20) s});
cq(q{SELECT pg_sleep(0.05)});
is(cq(q{SELECT idem_purge()}), '20', 'idem_purge deletes the expired records of every shard');
is(cq(q{SELECT count(*) FROM idem_records WHERE scope = 'short'}), '0', 'none left');
is(cq(q{SELECT records FROM idem_summary() WHERE scope = 'pay'}), '3',
	'idem_summary counts the records of every shard');

# ------------------------------------------------ pgbench through the coordinator
# 8 clients, 20 customers, 10 keys each, overlapping: an order is written
# only when idem_claim_at returns true, co-located with its record.
my ($clients, $per_client) = (8, 100);
my $total = $clients * $per_client;
$coord->pgbench(
	"-n -c $clients -j 2 -t $per_client",
	0,
	[ qr{number of transactions actually processed: $total/$total}, qr{number of failed transactions: 0 } ],
	[qr{^$}],
	'pgbench claims by shard key through the coordinator',
	{
		'citus_shard_claims' => q{
\set cust random(1000, 1019)
\set k random(1, 10)
\set fail random(1, 20)
BEGIN;
SELECT idem_claim_at(:cust, 'bench', 'o-' || :k) AS owned \gset
\if :owned
INSERT INTO orders VALUES (:cust, :k, :client_id);
\endif
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
}
	});
my ($orders, $records, $unmatched) = split /\|/, cq(q{
	SELECT (SELECT count(*) FROM orders WHERE customer_id >= 1000),
	       (SELECT count(*) FROM idem_records WHERE scope = 'bench'),
	       (SELECT count(*) FROM idem_records r WHERE r.scope = 'bench'
	          AND NOT EXISTS (SELECT 1 FROM orders o
	                          WHERE o.customer_id = r.shard_key AND 'o-' || o.id = r.key))});
note "pgbench: orders $orders, records $records";
ok($records > 0 && $records <= 200, 'claims overlapped');
is($orders, $records, 'one order per record: none twice (the primary key would have failed), none lost');
is($unmatched, '0', 'records and orders are the same keys');

# ------------------------------------------------ a guarded, co-located order table
# docs/citus.md, "From an empty cluster": the orders get a guard with
# history; a payment callback claims its key and moves its order in one
# single-shard transaction; a redelivery is a duplicate; an illegal move
# is refused with ID004 on the shard.
cq(q{SELECT idem_machine_define('order', '{"initial": ["new"],
  "transitions": {"new": ["paid", "cancelled"], "paid": ["shipped"]}}')});
cq(q{SELECT idem_guard('orders', 'status', 'order', version_column => 'version', history => true)});
cq(q{INSERT INTO orders (customer_id, id, amount) VALUES (42, 7, 99.00)});
($ret, $out, $err) = $coord->psql('postgres', q{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
SELECT idem_claim_at(42, 'payment', 'pay-7');
UPDATE orders SET status = 'paid'
 WHERE customer_id = 42 AND id = 7
   AND status = ANY (idem_sources('order', 'paid'));
COMMIT;});
is($ret, 0, 'the payment callback commits') or diag $err;
is($out, 't', 'its claim is owned');
unlike($err, qr/PREPARE TRANSACTION/, 'claim, guarded update and history: one shard, no two-phase commit');
@servers = ($err =~ /on server \S+@([\d.]+:\d+)/g);
%servers = map { $_ => 1 } @servers;
is(scalar keys %servers, 1, 'all on one worker');
is(cq(q{SELECT status || ':' || version FROM orders WHERE customer_id = 42 AND id = 7}), 'paid:1',
	'the order is paid, its version bumped');
my $ts = $c->shard_of('orders_transitions', 42);
is($c->node_of($ts)->port, $c->node_of($c->shard_of('idem_records', 42))->port,
	'its history shard is on the worker of the claim');
is($c->shard_rows('orders_transitions', $ts, q{customer_id = 42 AND from_state = 'new' AND to_state = 'paid'}),
	'1', 'the history row is there');
is(cq(q{SELECT idem_claim_at(42, 'payment', 'pay-7')}), 'f', 'the redelivered callback is a duplicate');
is( cq(q{UPDATE orders SET status = 'paid' WHERE customer_id = 42 AND id = 7
	AND status = ANY (idem_sources('order', 'paid')) RETURNING id}), '',
	'moving it to paid again changes nothing');
($ret, $out, $err) = try_sql(q{UPDATE orders SET status = 'new' WHERE customer_id = 42 AND id = 7});
like($err, qr/ID004/, 'an illegal move is refused with ID004');
is(cq(q{SELECT status FROM orders WHERE customer_id = 42 AND id = 7}), 'paid', 'and changes nothing');

$_->stop for $c->nodes;
done_testing();
