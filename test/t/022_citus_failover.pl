# Citus under failure and change: on a local
# cluster (test/t/IdemCitus.pm: a coordinator and two workers),
#   - pgbench through the coordinator, 8 clients on overlapping keys, a
#     co-located ledger row and a non-co-located audit row (Citus's
#     two-phase commit) written only when idem_claim returns true; one
#     worker's postmaster is killed with SIGKILL mid-run and restarted.
#     Afterwards: every key credited at most once, a record for every
#     credit and a credit for every record, the audit rows (committed
#     through 2PC) are exactly the credits, no prepared transaction is
#     left on any worker once the coordinator has recovered them, and the
#     killed worker's shards pass amcheck;
#   - idem_cluster_stats() on the coordinator answers each node's own
#     idem_stats, and names a node that is down;
#   - a third worker added and rebalance_table_shards() run: a shard of
#     idem_records moves to it, existing keys are still duplicates, new
#     claims work, lookups replay stored results, leases finish with their
#     tokens.
# Skipped when citus.so is not installed.  No timing assertions: every
# wait is bounded by poll_query_until or a deadline.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use IdemCitus;

IdemCitus::skip_unless_citus();

my $c = IdemCitus->new(workers => 2);
my ($coord, $w1, $w2) = $c->nodes;
sub cq { return $c->cq($_[0]); }

cq('SELECT idem_distribute()');
# The ledger has an index but no unique constraint: a key credited twice
# must show up, not fail.
cq(q{CREATE TABLE ledger (key text COLLATE "C" NOT NULL, client int NOT NULL);
CREATE INDEX ON ledger (key);
SELECT create_distributed_table('ledger', 'key', colocate_with => 'idem_records');
CREATE TABLE audit (id bigint NOT NULL, key text COLLATE "C" NOT NULL);
SELECT create_distributed_table('audit', 'id', colocate_with => 'none')});

# ------------------------------------------------ idem_cluster_stats
# Each node counts the calls made on it (idem_stats is shared memory of
# one server); idem_cluster_stats() on the coordinator collects them all.
for my $n ($c->nodes)
{
	$n->safe_psql('postgres', 'SELECT idem_stats_reset()');
}
# Inside a transaction block a claim runs on the coordinator (Citus does
# not delegate it there), so the coordinator counts it.
cq("BEGIN; SELECT idem_claim('st_coord', 'k' || i) FROM generate_series(1, 5) AS i;
SELECT idem_claim('st_coord', 'k1'); COMMIT");
# A claim made on a worker is counted there.
$w2->safe_psql('postgres',
	"SELECT idem_claim('st_w2', 'k' || i) FROM generate_series(1, 3) AS i");
# An autocommit claim through the coordinator runs, and is counted, on the
# worker that holds its key when idem_distribute() made idem_claim a
# distributed function (docs/citus.md, delegated claims); on the
# coordinator otherwise.
my $delegated = cq("SELECT count(*) > 0 FROM pg_dist_object
	WHERE classid = 'pg_proc'::regclass AND objid = 'idem_claim(text,text,interval,text)'::regprocedure
	  AND distribution_argument_index IS NOT NULL");
cq("SELECT idem_claim('st_auto', 'a1')");
my $auto_node = $delegated eq 't' ? $c->node_of($c->shard_of('idem_records', 'a1')) : $coord;
my %per_node;
for my $n ($c->nodes)
{
	$per_node{ $n->port } = $n->safe_psql('postgres',
		"SELECT string_agg(scope || ':' || claimed || ':' || duplicates, ',' ORDER BY scope)
		   FROM idem_stats WHERE datname = 'postgres' AND scope LIKE 'st_%'") // '';
}
my %cluster = map { my ($p, $v) = split /\|/, $_, 2; ($p => $v) } split /\n/, cq(
	"SELECT nodeport, string_agg(scope || ':' || claimed || ':' || duplicates, ',' ORDER BY scope)
	   FROM idem_cluster_stats() WHERE datname = 'postgres' AND scope LIKE 'st_%'
	  GROUP BY nodeport");
for my $n ($c->nodes)
{
	is($cluster{ $n->port } // '', $per_node{ $n->port },
		"idem_cluster_stats: the row of node " . $n->port . " is its own idem_stats ($per_node{ $n->port })");
}
is( cq("SELECT sum(claimed) FILTER (WHERE scope = 'st_coord') || ':' || sum(duplicates) FILTER (WHERE scope = 'st_coord')
	   || ':' || sum(claimed) FILTER (WHERE scope = 'st_w2') FROM idem_cluster_stats() WHERE datname = 'postgres'"),
	'5:1:3', 'idem_cluster_stats: every call is counted once, on some node');
like($per_node{ $coord->port }, qr/st_coord:5:1/,
	"the coordinator's calls in a transaction block are in the coordinator's row")
  or note 'per node: ' . join(' ', map { "$_=$per_node{$_}" } sort keys %per_node);
like($per_node{ $w2->port }, qr/st_w2:3:0/, "the worker's calls are in that worker's row");
like($per_node{ $auto_node->port }, qr/st_auto:1:0/,
	'an autocommit claim through the coordinator is in the row of the node that ran it ('
	  . ($delegated eq 't' ? 'delegated to the worker of its key' : 'the coordinator') . ')');
is( cq("SELECT count(DISTINCT nodeport) FROM idem_cluster_stats() AS s
	     JOIN pg_dist_node n USING (nodeport) WHERE s.nodename = n.nodename"),
	scalar(grep { $per_node{$_} ne '' } keys %per_node),
	'nodename and nodeport are those of pg_dist_node');
is( cq("SELECT has_function_privilege('public', 'idem_cluster_stats()', 'EXECUTE')::text
	    || ':' || has_function_privilege('pg_monitor', 'idem_cluster_stats()', 'EXECUTE')::text"),
	'false:true', 'idem_cluster_stats: not public, granted to pg_monitor (as idem_stats)');
$coord->safe_psql('postgres', 'CREATE DATABASE plain');
$coord->safe_psql('plain', 'CREATE EXTENSION idempotency');
my ($ret, $out, $err) = $coord->psql('plain',
	"\\set VERBOSITY verbose\nSELECT * FROM idem_cluster_stats()");
like($err, qr/55000: idem_cluster_stats: the citus extension is not installed in this database/,
	'idem_cluster_stats without citus: 55000');
like($err, qr/HINT:  On a single server, read the idem_stats view/, 'with a hint');

# ------------------------------------------------ pgbench, a worker killed
# 8 clients on 400 overlapping keys.  When idem_claim returns true: a
# ledger row on the key's shard (one single-shard transaction with the
# claim) and an audit row on the shard of a random id (another worker,
# mostly: Citus's 2PC).  One transaction in twenty rolls back.  Half of
# the transactions are instead an autocommit claim of scope 'auto', which
# idem_distribute() delegates to the key's worker when it made idem_claim
# a distributed function (there it writes into the shard by the fast
# path): those records are in the amcheck below too.
my $auto_text = q{
\set k random(1, 400)
SELECT idem_claim('auto', 'key-' || :k);
};
my $script_text = q{
\set k random(1, 400)
\set a random(1, 1000000000)
\set fail random(1, 20)
BEGIN;
SELECT idem_claim('bench', 'key-' || :k) AS owned \gset
\if :owned
INSERT INTO ledger VALUES ('key-' || :k, :client_id);
INSERT INTO audit VALUES (:a, 'key-' || :k);
SELECT idem_complete('bench', 'key-' || :k, jsonb_build_object('client', :client_id));
\endif
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
};
my $script = "$PostgreSQL::Test::Utils::tmp_check/citus_failover.pgbench";
open my $fh, '>', $script or die "$script: $!";
print $fh $script_text;
close $fh;
my $auto = "$PostgreSQL::Test::Utils::tmp_check/citus_failover_auto.pgbench";
open $fh, '>', $auto or die "$auto: $!";
print $fh $auto_text;
close $fh;

sub pgbench_args
{
	my ($per_client) = @_;
	return ('pgbench', '-n', '-c', 8, '-j', 2, '-t', $per_client,
		'-h', $coord->host, '-p', $coord->port, '-f', $script, '-f', $auto, 'postgres');
}

# Wait until no process of a killed server is left (as 010_crash_recovery.pl).
sub wait_for_old_processes
{
	my ($node, $postmaster) = @_;
	my $data = $node->data_dir;
	for (1 .. 600)
	{
		my $alive = kill(0, $postmaster) ? 1 : 0;
		for my $cwd (glob '/proc/[0-9]*/cwd')
		{
			my $target = readlink $cwd;
			$alive++ if defined $target && $target eq $data;
		}
		return if $alive == 0;
		usleep(100_000);
	}
	note 'processes of the killed server are still running';
	return;
}

my ($pout, $perr) = ('', '');
my $h = IPC::Run::start([ pgbench_args(250) ], '>', \$pout, '2>', \$perr);
ok($coord->poll_query_until('postgres', 'SELECT count(*) >= 60 FROM ledger'),
	'pgbench through the coordinator is crediting');

ok($h->pumpable, 'pgbench is still running when the worker is killed');
my $victim = $w1;
# A deterministic leftover besides whatever 2PC the workload has in
# flight: on the victim, a claim prepared under a Citus transaction name
# (coordinator group 0) that the coordinator never decided to commit, as
# a crash between PREPARE and the coordinator's commit record leaves it.
my ($orphan) = keys_on($victim, "SELECT 'orphan' || i FROM generate_series(1, 200) AS i");
my $orphan_shard = $c->shard_of('idem_records', $orphan);
$victim->safe_psql('postgres', qq{
	SET citus.enable_manual_changes_to_shards = on;
	BEGIN;
	INSERT INTO idem_records_$orphan_shard (scope, key, status, created_at, updated_at, expires_at)
	VALUES ('orphan', '$orphan', 'claimed', now(), now(), now() + interval '1 day');
	PREPARE TRANSACTION 'citus_0_4242_999999999_0';});
my $log_offset = -s $victim->logfile;
my $postmaster = $victim->{_pid};
$victim->kill9;
wait_for_old_processes($victim, $postmaster);
# While it is down, idem_cluster_stats names it instead of leaving it out.
($ret, $out, $err) = $coord->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT count(*) FROM idem_cluster_stats()");
like($err, qr/55000: idem_cluster_stats: node 127\.0\.0\.1:${\ $victim->port} did not answer/,
	'idem_cluster_stats with a worker down: 55000 naming the node');
$victim->start;
ok($victim->poll_query_until('postgres', 'SELECT 1', '1'), 'the killed worker is back');
like(slurp_file($victim->logfile, $log_offset),
	qr/database system was interrupted; last known up at|database system was not properly shut down/,
	'it went through crash recovery');

# pgbench goes on: the clients that hit the dead worker aborted, the
# others finish their transactions.
my $deadline = time + 180;
while ($h->pumpable && time < $deadline)
{
	$h->pump_nb;
	usleep(100_000);
}
$h->kill_kill if $h->pumpable;
eval { $h->finish };
my ($done1) = $pout =~ /number of transactions actually processed: (\d+)/;
note "pgbench during the crash: processed " . ($done1 // '?') . '; '
  . join(' | ', grep { /abort|error|ERROR/ } split /\n/, substr($perr, 0, 1500));

# The prepared transactions of Citus's 2PC that the crash left: the
# coordinator commits those it had decided to commit and aborts the others.
my $prepared = join ',', map { $_->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts') }
  ($w1, $w2);
note "prepared transactions on the workers after the restart: $prepared";
is( $victim->safe_psql('postgres',
		"SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'citus_0_4242_999999999_0'"),
	'1', 'the prepared claim survived the crash');
my $left = -1;
for (1 .. 300)
{
	cq('SELECT recover_prepared_transactions()');
	$left = 0;
	$left += $_->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts') for ($w1, $w2);
	last if $left == 0;
	usleep(200_000);
}
is($left, 0, 'no prepared transaction is left on any worker after recover_prepared_transactions()');
is(cq("SELECT idem_claim('orphan', '$orphan')"), 't',
	'the claim prepared without a commit decision was rolled back: its key is free');

# Then the workload runs again, without a failure.
my $total = 8 * 50;
$coord->pgbench(
	"-n -c 8 -j 2 -t 50",
	0,
	[
		qr{number of transactions actually processed: $total/$total},
		qr{number of failed transactions: 0 }
	],
	[qr{^$}],
	'pgbench after the restart: every transaction succeeds',
	{ 'citus_failover' => $script_text, 'citus_failover_auto' => $auto_text });

if ($delegated eq 't')
{
	is( $coord->safe_psql('postgres',
			"SELECT coalesce(sum(claimed + duplicates), 0) FROM idem_stats WHERE scope = 'auto'"),
		'0', 'the autocommit claims ran on the workers (delegated), none on the coordinator');
	cmp_ok( cq("SELECT coalesce(sum(claimed + duplicates), 0) FROM idem_cluster_stats() WHERE scope = 'auto'"),
		'>', 0, 'and were counted there');
}
# The keys are read first (a subquery that Citus runs before the rest),
# then claimed on the coordinator: idem_claim in a query on idem_records
# itself would run on the shards, where without the fast path (PostgreSQL
# 16 and later, see 020_citus.pl) it is a distributed query inside a query
# on a shard, which Citus refuses.
my ($autos, $auto_new) = split /\|/, cq(q{
	SELECT count(*), count(*) FILTER (WHERE idem_claim('auto', k))
	  FROM unnest((SELECT array_agg(key) FROM idem_records WHERE scope = 'auto')) AS k});
note "autocommit claims: $autos records";
ok($autos > 0 && $autos <= 400, 'the autocommit claims left one record per key at most');
is($auto_new, '0', 'and each of those keys is a duplicate');
my ($credits, $credited, $records, $completed, $unmatched) = split /\|/, cq(q{
	SELECT (SELECT count(*) FROM ledger),
	       (SELECT count(DISTINCT key) FROM ledger),
	       (SELECT count(*) FROM idem_records WHERE scope = 'bench'),
	       (SELECT count(*) FROM idem_records WHERE scope = 'bench' AND status = 'completed'),
	       (SELECT count(*) FROM idem_records r WHERE r.scope = 'bench'
	          AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.key = r.key))});
note "after the crash: credits $credits, keys $credited, records $records";
ok($records > 60 && $records <= 400, 'claims were made and overlapped');
is($credits, $credited, 'no key was credited twice');
is($records, $credited, 'every credit has its record and every record its credit (balance = records)');
is($completed, $records, 'every record is completed');
is($unmatched, '0', 'records and ledger rows are the same keys');
is( cq("SELECT string_agg(key, ',' ORDER BY key) FROM audit"),
	cq("SELECT string_agg(key, ',' ORDER BY key) FROM ledger"),
	'the audit rows (other shards, 2PC) are exactly the credits');

# amcheck on the killed worker's shards of idem_records and ledger.
# (Created through the coordinator, which propagates it to every node:
# Citus refuses CREATE EXTENSION on a worker.)
cq('CREATE EXTENSION IF NOT EXISTS amcheck');
my @shards = split /\n/, cq(
	"SELECT s.logicalrelid::text || '_' || s.shardid FROM pg_dist_shard s
	   JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid)
	  WHERE s.logicalrelid IN ('idem_records'::regclass, 'ledger'::regclass)
	    AND n.nodeport = " . $victim->port . ' ORDER BY 1');
cmp_ok(scalar @shards, '>=', 2, 'the killed worker holds shards of idem_records and ledger: ' . join(' ', @shards));
my $in = join ', ', map { "'$_'" } @shards;
my $vis = 'SET citus.override_table_visibility = off;';
my $corrupt = $victim->safe_psql('postgres', qq{$vis
	SELECT count(*) FROM pg_class c, LATERAL verify_heapam(c.oid::regclass) v WHERE c.relname IN ($in)});
is($corrupt, '0', "verify_heapam finds nothing in the killed worker's shards");
my @indexes = split /\n/, $victim->safe_psql('postgres', qq{$vis
	SELECT i.indexrelid::regclass FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
	 WHERE c.relname IN ($in) ORDER BY 1});
cmp_ok(scalar @indexes, '>=', scalar @shards, 'the shards have their indexes: ' . join(' ', @indexes));
my @bad;
for my $idx (@indexes)
{
	my ($r, $o, $e) = $victim->psql('postgres',
		"$vis SELECT bt_index_check('$idx', true), bt_index_parent_check('$idx', true, true)");
	push @bad, "$idx: $e" if $r != 0;
}
is(join('; ', @bad), '', 'bt_index_check and bt_index_parent_check (heapallindexed) pass on every shard index');

# ------------------------------------------------ a third worker, rebalance
# Records of every kind before the move: completed with a result, claimed,
# in progress under a lease.
cq("SELECT idem_claim('rb', 'c' || i), idem_complete('rb', 'c' || i, jsonb_build_object('n', i))
      FROM generate_series(1, 40) AS i");
cq("SELECT idem_claim('rb', 'p' || i) FROM generate_series(1, 40) AS i");
my %token = map { split /\|/ } split /\n/, cq(
	"SELECT 'l' || i, (idem_begin('rb', 'l' || i, lease => '1 hour')).token FROM generate_series(1, 40) AS i");
is(scalar keys %token, 40, 'forty leases taken');

my $w3 = $c->add_worker;
# block_writes: the shards are copied with COPY while writes to them wait;
# no logical replication, so no wal_level = logical (and restart) on the
# nodes and no replication slots.
cq("SELECT rebalance_table_shards(shard_transfer_mode => 'block_writes')");
my $on_w3 = cq("SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
	JOIN pg_dist_node n USING (groupid)
	WHERE s.logicalrelid = 'idem_records'::regclass AND n.nodeport = " . $w3->port);
cmp_ok($on_w3, '>=', 1, "rebalance_table_shards moved $on_w3 shard(s) of idem_records to the new worker");
# Keys whose shard is on the new worker, in one query.
sub keys_on
{
	my ($node, $keys_sql) = @_;
	return split /\n/, cq("SELECT k FROM ($keys_sql) AS x(k)
	  WHERE (SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
	          WHERE p.shardid = get_shard_id_for_distribution_column('idem_records', x.k)) = " . $node->port
	  . ' ORDER BY k');
}
my @moved = keys_on($w3, "SELECT p || i FROM generate_series(1, 40) AS i, unnest(ARRAY['c', 'p', 'l']) AS p");
cmp_ok(scalar @moved, '>=', 1, 'some of the earlier keys now live on the new worker (' . scalar(@moved) . ')');
is( $c->shard_rows('idem_records', $c->shard_of('idem_records', $moved[0]), "key = '$moved[0]'"),
	'1', "the record of $moved[0] is in its shard on the new worker");

is(cq("SELECT count(*) FILTER (WHERE NOT idem_claim('rb', k)) FROM unnest(ARRAY(
	SELECT p || i FROM generate_series(1, 40) AS i, unnest(ARRAY['c', 'p', 'l']) AS p)) AS k"),
	'120', 'every existing key is still a duplicate, wherever its shard went');
is(cq("SELECT count(*) FILTER (WHERE idem_claim('rb', 'n' || i)) FROM generate_series(1, 40) AS i"),
	'40', 'new claims work');
is(cq("SELECT count(*) FROM generate_series(1, 40) AS i, LATERAL idem_lookup('rb', 'c' || i) AS l
	 WHERE l.status = 'completed' AND l.result = jsonb_build_object('n', i)"),
	'40', 'lookups replay the stored results');
my ($moved_lease) = grep { /^l/ } @moved;
$moved_lease //= 'l1';
($ret, $out, $err) = $coord->psql('postgres',
	"SELECT idem_finish('rb', '$moved_lease', " . ($token{$moved_lease} + 1000000) . ", '{}')");
isnt($ret, 0, "a wrong token for $moved_lease is still refused after the move");
my $finished = 0;
for my $k (sort keys %token)
{
	my ($r) = $coord->psql('postgres', "SELECT idem_finish('rb', '$k', $token{$k}, '{\"done\": true}')");
	$finished++ if $r == 0;
}
is($finished, 40, 'the leases finish with their tokens');
is(cq("SELECT count(*) FROM idem_records WHERE scope = 'rb' AND key LIKE 'l%' AND status = 'completed'"),
	'40', 'and are completed');
is(cq("SELECT count(*) FROM ledger") . ':' . cq("SELECT count(*) FROM idem_records WHERE scope = 'bench'"),
	"$credits:$records", 'the ledger and the records of the pgbench run are all still there');
is( cq("SELECT records || ':' || completed FROM idem_summary() WHERE scope = 'rb'"),
	'160:80', 'idem_summary on the coordinator counts the records of every shard, the moved ones too');
# Autocommit claims one by one (delegated to the worker that now holds
# the key, when idem_claim is a distributed function): a moved key is a
# duplicate, a new key of a moved shard is claimed once.
is(cq("SELECT idem_claim('rb', '$moved[0]')"), 'f', "an autocommit claim of the moved key $moved[0] is a duplicate");
my ($fresh) = keys_on($w3, "SELECT 'fresh' || i FROM generate_series(1, 200) AS i");
is(cq("SELECT idem_claim('rb', '$fresh')"), 't', "an autocommit claim of a new key on the new worker ($fresh) is true");
is(cq("SELECT idem_claim('rb', '$fresh')"), 'f', 'and then a duplicate');
is($c->shard_rows('idem_records', $c->shard_of('idem_records', $fresh), "key = '$fresh'"), '1',
	'its record is in the shard on the new worker');
is($w3->safe_psql('postgres', "SELECT idem_claim('rb', '$moved[0]')"), 'f',
	'a claim on the new worker sees the moved record too');

$_->stop for $c->nodes;
done_testing();
