# Citus: the background purge (idempotency.purge_databases) on the
# coordinator only, with idem_records distributed by key
# (docs/operations.md, "On a Citus cluster"):
# - its rounds delete the expired records of every shard, on every worker,
#   and leave the live ones;
# - a round that is in the middle of its batches when a third worker joins
#   and rebalance_table_shards(shard_transfer_mode => 'block_writes')
#   moves shards to it goes on to its end: the first move waits for the
#   round's batch (held by a session that locks one of its rows), the
#   round's next batches run while shards move, nothing is lost or purged
#   twice, and the LOG lines account for every record removed;
# - after the move, expired records on the moved shards (now on the new
#   worker) are purged too.
# The test never calls idem_purge itself.  Skipped when citus.so is not
# installed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemCitus;

IdemCitus::skip_unless_citus();

# Purging is off (naptime 0) until the records are in place.
my $c = IdemCitus->new(
	workers => 2,
	conf => "citus.shard_count = 8\n",
	coord_conf => q{
idempotency.purge_databases = 'postgres'
idempotency.purge_naptime = 0
idempotency.purge_batch_size = 100
idempotency.purge_delay = 10ms
});
my $coord = $c->coord;
sub cq { return $c->cq($_[0]); }

cq('SELECT idem_distribute()');
ok( $coord->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'idempotency purge launcher'}),
	'the purge launcher runs on the coordinator');
for my $w ($c->workers)
{
	is( $w->safe_psql('postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'idempotency purge%'}),
		'0', 'and on no worker (port ' . $w->port . ')');
}

# Records already expired, in three groups by expiry (the purge takes the
# oldest first, 100 a batch): 3000 keys, then one key that a session will
# hold locked, then 3000 more; and 500 live ones.  Written by hand, one
# INSERT ... SELECT that Citus spreads over the shards.
cq(q{INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 'early', 'e' || g, 'completed', now() - interval '1 day', now() - interval '1 day',
	       now() - interval '3 hours' + g * interval '1 millisecond'
	FROM generate_series(1, 3000) g
	UNION ALL
	SELECT 'held', 'h', 'completed', now() - interval '1 day', now() - interval '1 day',
	       now() - interval '2 hours'
	UNION ALL
	SELECT 'late', 'l' || g, 'completed', now() - interval '1 day', now() - interval '1 day',
	       now() - interval '1 hour' + g * interval '1 millisecond'
	FROM generate_series(1, 3000) g
	UNION ALL
	SELECT 'live', 'v' || g, 'completed', now(), now(), now() + interval '1 day'
	FROM generate_series(1, 500) g});

# Expired records of a shard, read on the node that holds its placement.
sub expired_by_shard
{
	my %by;
	for my $s (split /\n/, cq(q{SELECT shardid FROM pg_dist_shard
		WHERE logicalrelid = 'idem_records'::regclass ORDER BY shardid}))
	{
		$by{$s} = $c->shard_rows('idem_records', $s, 'expires_at <= now()');
	}
	return %by;
}
my %before = expired_by_shard();
is(scalar(grep { $_ > 0 } values %before), 8, 'every one of the 8 shards holds expired records');
is(cq(q{SELECT count(*) FROM idem_records}), '6501', 'all 6501 records are there');

# A session holds the row of the key in the middle, so that the round stops
# there, its early batches done.
my $holder = $coord->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT key FROM idem_records WHERE scope = 'held' AND key = 'h' FOR UPDATE;});
my $held_node = $c->node_of($c->shard_of('idem_records', 'h'));

cq(q{ALTER SYSTEM SET idempotency.purge_naptime = '1s'});
cq(q{SELECT pg_reload_conf()});
ok( $coord->poll_query_until('postgres', q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'early'}),
	'the purge worker deletes the early records');
ok( $held_node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %idem_records%'}),
	'its batch with the held key waits for the holder, on the worker of that key');
is(cq(q{SELECT count(*) FROM idem_records WHERE scope = 'late'}), '3000',
	'the later records are all there (the waiting batch has not committed)');

# A third worker, and a rebalance that moves shards of idem_records to it,
# while the round waits in the middle of its batches.
my $w3 = $c->add_worker;
my $rebalance = $coord->background_psql('postgres');
$rebalance->query_until(qr/rebalancing/,
	"\\echo rebalancing\nSELECT rebalance_table_shards(shard_transfer_mode => 'block_writes');\n\\echo rebalanced\n");
ok( $coord->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE query LIKE 'SELECT rebalance_table_shards%' AND state = 'active'}),
	'the rebalance runs');
# Its first move of a shard of idem_records needs Citus's metadata lock of
# that shard, which the waiting batch (a modification of every shard)
# holds: the move waits for the round.
ok( $coord->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE query LIKE '%citus_move_shard_placement%' AND wait_event_type = 'Lock'}),
	'a shard move waits for the batch of the round')
  or diag(cq(q{SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 100)
	FROM pg_stat_activity WHERE state <> 'idle'}));
$holder->query_safe('COMMIT');
$holder->quit;
$rebalance->query_until(qr/rebalanced/, '');
$rebalance->quit;
my $on_w3 = cq(q{SELECT count(*) FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
	JOIN pg_dist_node n USING (groupid)
	WHERE s.logicalrelid = 'idem_records'::regclass AND n.nodeport = } . $w3->port);
cmp_ok($on_w3, '>=', 1, "the rebalance moved $on_w3 shard(s) of idem_records to the new worker");

ok( $coord->poll_query_until('postgres', q{SELECT count(*) = 0 FROM idem_records WHERE expires_at <= now()}),
	'the round goes on to the end: no expired record left');
my %after = expired_by_shard();
is(join(',', grep { $after{$_} ne '0' } sort keys %after), '', 'none on any shard, read on its node');
is(cq(q{SELECT count(*) FROM idem_records WHERE scope = 'live'}), '500', 'the 500 live records are untouched');
is(cq(q{SELECT count(DISTINCT key) FROM idem_records WHERE scope = 'live'}), '500', 'each once');

# The LOG lines of the coordinator: every record removed is accounted for,
# so no round removed some and then failed.
sub removed_in_log
{
	my $total = 0;
	my $log = slurp_file($coord->logfile);
	$total += $1 while $log =~ /LOG:  idempotency purge: removed (\d+) expired records in database "postgres"/g;
	return $total;
}
is(removed_in_log(), 6001, 'the LOG lines account for the 6001 records removed');
like(slurp_file($coord->logfile), qr/removed 6001 expired records in database "postgres" \(61 transactions\)/,
	'by one round, of 61 batches, across the moves');
my @failed = (slurp_file($coord->logfile) =~ /"idempotency purge worker" \(PID \d+\) exited with exit code 1/g);
is(scalar @failed, 0, 'no purge round failed');

# After the move: expired records on the new worker's shards are purged too.
cq(q{INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
	SELECT 'after', 'a' || g, 'completed', now(), now(), now() - interval '1 second'
	FROM generate_series(1, 300) g});
my $moved = cq(q{SELECT count(*) FROM generate_series(1, 300) g
	JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('idem_records', 'a' || g)
	JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = } . $w3->port);
cmp_ok($moved, '>', 0, "$moved of the new expired records are on the new worker");
ok( $coord->poll_query_until('postgres', q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'after'}),
	'the purge worker deletes them too');
%after = expired_by_shard();
is(join(',', grep { $after{$_} ne '0' } sort keys %after), '', 'on every shard, the new worker\'s included');
is(removed_in_log(), 6301, 'the LOG lines account for them');

$_->stop for $c->nodes;
done_testing();
