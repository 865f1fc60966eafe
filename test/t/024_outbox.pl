# The outbox end to end, with real logical decoding.
#
# Producers (pgbench, 8 clients) claim a key and, when the claim is
# theirs, write a business effect and publish one message (relay 'both':
# a row of idem_outbox and a transactional logical decoding message), for
# one of 40 aggregates; every key ending in 7 rolls back.  Eight consumers
# of one group (psql sessions running a procedure) fetch with leases,
# apply each message through idem_inbox in a transaction of its own, then
# acknowledge it (even workers one by one, odd ones the batch at once with
# idem_outbox_ack_many); a consumer "dies" after applying some messages and
# before acknowledging them (deterministically: attempt 1 of positions
# divisible by 17), two consumers are terminated mid-run, and then the
# server is killed with SIGKILL mid-load and restarted; producers and
# consumers start again and run to the end.  Then:
#   - the slot (test_decoding, created before the load) has exactly one
#     INSERT into idem_outbox and exactly one message per committed claim,
#     with the claim's message id, and nothing for rolled-back ones;
#   - within each aggregate, the decoded (commit) order is the order of
#     positions;
#   - a second topic set to pull => false (Debezium only): one row per
#     committed claim, decoded once, no aggregate lock taken;
#   - a third, relayed by the table only, published to an aggregate of
#     its own (the C edition takes its lock and makes its group's runs on
#     the fast path): one row per committed claim, decoded once, positions
#     in commit order, and its group, drained at the end by one consumer,
#     gets each message once, in position order within each aggregate;
#   - every message was applied exactly once at the inbox, in position
#     order within each aggregate, and acknowledged; redeliveries happened
#     and were recognised by the inbox;
#   - pg_dump keeps the outbox tables (the message ids stay duplicates).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $consumers  = 8;
my $producers  = 8;
my $nkeys      = 200000;
my $aggregates = 40;

my $node = PostgreSQL::Test::Cluster->new('outbox');
$node->init(allows_streaming => 'logical');
$node->append_conf(
	'postgresql.conf', qq{
max_connections = 60
restart_after_crash = on
log_statement = none
log_min_messages = warning
});
$node->start;

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION idempotency;
SELECT pg_create_logical_replication_slot('outbox_slot', 'test_decoding');
SELECT idem_outbox_topic('tap', relay => 'both');
-- A topic only Debezium reads: no aggregate lock, no group.
SELECT idem_outbox_topic('tapd', pull => false);
-- Relayed by the table only, with a group drained at the end.
SELECT idem_outbox_subscribe('tapqg', 'tapq', from_start => true);
SELECT idem_outbox_subscribe('tapc', 'tap', from_start => true);
-- The producers' business effects and the consumers' applied messages.
-- No unique constraints: a duplicate must show up, not fail.
CREATE TABLE effects (k int NOT NULL, client int NOT NULL);
CREATE TABLE applied (seq bigserial PRIMARY KEY, id uuid NOT NULL, aggregate text,
                      position bigint, worker int);
CREATE TABLE redeliveries (id uuid NOT NULL, worker int);
CREATE TABLE control (done boolean NOT NULL);
INSERT INTO control VALUES (false);

-- One consumer: fetch a batch (its leases commit), then per message one
-- transaction with the inbox claim and the effect, then the
-- acknowledgement (odd workers: of what they applied of the batch, at
-- once, with idem_outbox_ack_many).  A consumer that dies after applying
-- a message and before acknowledging it is played by leaving the rest of
-- the batch (attempt 1 of every position divisible by 17).  Ends when the
-- producers are done and the group has nothing left to acknowledge.
CREATE PROCEDURE consume_loop(worker int)
LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
    atts int[];
    acked uuid[] := '{}';
    pos bigint;
    deadline timestamptz := clock_timestamp() + interval '10 minutes';
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        SELECT array_agg(f.id ORDER BY f.n), array_agg(f.attempts ORDER BY f.n)
          INTO ids, atts
          FROM idem_outbox_fetch('tapc', 10, '2 seconds')
               WITH ORDINALITY AS f(id, topic, aggregate, type, payload, headers,
                                    created_at, attempts, n);
        COMMIT;
        IF ids IS NULL THEN
            EXIT WHEN (SELECT done FROM control)
                  AND (SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'tapc') = 0;
            PERFORM pg_sleep(0.02);
            COMMIT;
            CONTINUE;
        END IF;
        FOR i IN 1 .. cardinality(ids) LOOP
            SELECT o.position INTO pos FROM idem_outbox o WHERE o.id = ids[i];
            IF idem_inbox('tapc', ids[i]) THEN
                INSERT INTO applied (id, aggregate, position, worker)
                SELECT o.id, o.aggregate, o.position, worker FROM idem_outbox o WHERE o.id = ids[i];
            ELSE
                INSERT INTO redeliveries VALUES (ids[i], worker);
            END IF;
            COMMIT;
            EXIT WHEN atts[i] = 1 AND pos % 17 = 0;
            IF worker % 2 = 0 THEN
                PERFORM idem_outbox_ack('tapc', ids[i]);
                COMMIT;
            ELSE
                acked := acked || ids[i];
            END IF;
        END LOOP;
        -- odd workers acknowledge what they applied of the batch at once
        IF cardinality(acked) > 0 THEN
            PERFORM idem_outbox_ack_many('tapc', acked);
            COMMIT;
        END IF;
        acked := '{}';
    END LOOP;
END $$;
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $script = "$dir/produce.sql";
open my $fh, '>', $script or die "cannot write $script: $!";
print $fh qq{
\\set k random(1, $nkeys)
\\set agg random(1, $aggregates)
\\set aq random(1, $aggregates)
BEGIN;
SELECT idem_claim('tap', 'k' || :k) AS owned \\gset
\\if :owned
INSERT INTO effects (k, client) VALUES (:k, :client_id);
SELECT idem_publish('tap', jsonb_build_object('k', :k), aggregate => 'agg' || :agg) IS NOT NULL AS published \\gset
SELECT idem_publish('tapd', jsonb_build_object('k', :k), aggregate => 'agg' || :agg) IS NOT NULL AS published \\gset
SELECT idem_publish('tapq', jsonb_build_object('k', :k), aggregate => 'agg' || :aq) IS NOT NULL AS published \\gset
\\endif
\\if :k % 10 = 7
ROLLBACK;
\\else
COMMIT;
\\endif
};
close $fh;

sub start_producers
{
	my ($how) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', $producers, '-j', 2, @$how,
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return [ $h, \$out, \$err ];
}

my @consumer;    # worker => IPC::Run handle

sub start_consumer
{
	my ($w) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PGAPPNAME} = "consumer_$w";
	local $ENV{PGOPTIONS} = '-c statement_timeout=0';
	$consumer[$w] = [
		IPC::Run::start(
			[
				'psql', '-X', '-q', '-h', $node->host, '-p', $node->port,
				'-d', 'postgres', '-c', "CALL consume_loop($w)"
			],
			'>', \$out, '2>', \$err),
		\$out, \$err ];
	return;
}

sub finish
{
	my ($p, $deadline) = @_;
	my $h = $p->[0];
	while ($h->pumpable && time < $deadline)
	{
		$h->pump_nb;
		usleep(100_000);
	}
	$h->kill_kill if $h->pumpable;
	eval { $h->finish };
	return $h->full_result(0);    # the wait status: 0 when it exited 0
}

sub wait_for_old_processes
{
	my ($postmaster) = @_;
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

# --- the load, with consumers killed and then the server --------------------
my $prod = start_producers([ '-T', 300 ]);
start_consumer($_) for 1 .. $consumers;

ok( $node->poll_query_until('postgres',
		q{SELECT (SELECT count(*) FROM idem_outbox WHERE topic = 'tap') >= 300 AND (SELECT count(*) FROM applied) >= 100}),
	'producers publish and consumers apply');

# Two consumers are killed in the middle of whatever they are doing; new
# ones take their place.
for my $w (3, 6)
{
	my $killed = $node->safe_psql('postgres',
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'consumer_$w'");
	is($killed, '1', "consumer $w terminated mid-run");
	finish($consumer[$w], time + 30);
	start_consumer($w);
}
ok( $node->poll_query_until('postgres',
		q{SELECT (SELECT count(*) FROM idem_outbox WHERE topic = 'tap') >= 900 AND (SELECT count(*) FROM redeliveries) >= 1}),
	'the load goes on after the consumers were replaced');

my $log_offset = -s $node->logfile;
my $postmaster = $node->{_pid};
$node->kill9;
wait_for_old_processes($postmaster);
$node->start;
like(slurp_file($node->logfile, $log_offset),
	qr/database system was interrupted; last known up at|database system was not properly shut down/,
	'the server went through crash recovery');
finish($prod, time + 60);
finish($consumer[$_], time + 60) for 1 .. $consumers;

my $before = $node->safe_psql('postgres', q{SELECT count(*) FROM idem_outbox WHERE topic = 'tap'});
cmp_ok($before, '>=', 900, "messages committed before the crash: $before");

# After the crash: the same again, to the end.
start_consumer($_) for 1 .. $consumers;
$prod = start_producers([ '-t', 150 ]);
is(finish($prod, time + 600), 0, 'producers after the crash ran to the end');
note ${ $prod->[2] } if ${ $prod->[2] } ne '';
$node->safe_psql('postgres', 'UPDATE control SET done = true');
for my $w (1 .. $consumers)
{
	is(finish($consumer[$w], time + 600), 0, "consumer $w drained the group and ended")
	  or diag ${ $consumer[$w]->[2] };
}

# --- what the slot decoded ----------------------------------------------------
$node->safe_psql(
	'postgres', q{
CREATE TABLE decoded AS
SELECT c.n, c.data
  FROM pg_logical_slot_get_changes('outbox_slot', NULL, NULL, 'skip-empty-xacts', '1')
       WITH ORDINALITY AS c(lsn, xid, data, n);
CREATE TABLE decoded_rows AS
SELECT n, substring(data FROM 'id\[uuid\]:''([0-9a-f-]+)''')::uuid AS id,
       substring(data FROM ' topic\[text\]:''([a-z]+)''') AS topic
  FROM decoded WHERE data LIKE 'table public.idem_outbox: INSERT: %';
CREATE TABLE decoded_messages AS
SELECT n, substring(data FROM 'content:(.*)$')::jsonb AS m
  FROM decoded WHERE data LIKE 'message: transactional: 1 prefix: idempotency.outbox, %';
-- The messages every committed claim must have produced, by id.
CREATE TABLE claims AS
SELECT r.key, idem_outbox_id('tap', r.key, 'tap') AS id
  FROM idem_records r WHERE r.scope = 'tap';
});

my %q = (
	claims => 'SELECT count(*) FROM claims',
	effects => 'SELECT count(*) FROM effects',
	distinct_effects => 'SELECT count(DISTINCT k) FROM effects',
	rows => q{SELECT count(*) FROM idem_outbox WHERE topic = 'tap'},
	decoded_rows => q{SELECT count(*) FROM decoded_rows WHERE topic = 'tap'},
	decoded_distinct => q{SELECT count(DISTINCT id) FROM decoded_rows WHERE topic = 'tap'},
	rows_debezium => q{SELECT count(*) FROM idem_outbox WHERE topic = 'tapd' AND NOT pulled},
	decoded_debezium => q{SELECT count(DISTINCT d.id) FROM decoded_rows d JOIN claims c ON d.id = idem_outbox_id('tapd', c.key, 'tap') WHERE d.topic = 'tapd'},
	decoded_debezium_all => q{SELECT count(*) FROM decoded_rows WHERE topic = 'tapd'},
	rows_q => q{SELECT count(*) FROM idem_outbox WHERE topic = 'tapq' AND pulled},
	decoded_q => q{SELECT count(DISTINCT d.id) FROM decoded_rows d JOIN claims c ON d.id = idem_outbox_id('tapq', c.key, 'tap') WHERE d.topic = 'tapq'},
	decoded_q_all => q{SELECT count(*) FROM decoded_rows WHERE topic = 'tapq'},
	decoded_messages => 'SELECT count(*) FROM decoded_messages',
	decoded_messages_distinct => q{SELECT count(DISTINCT m->>'id') FROM decoded_messages},
	applied => 'SELECT count(*) FROM applied',
	applied_distinct => 'SELECT count(DISTINCT id) FROM applied',
);
my %n = map { $_ => $node->safe_psql('postgres', $q{$_}) } keys %q;
note join(', ', map { "$_ $n{$_}" } sort keys %n);
cmp_ok($n{claims}, '>', $before, 'claims committed before and after the crash');
is($n{effects}, $n{claims}, 'one business effect per committed claim');
is($n{distinct_effects}, $n{claims}, 'no effect twice');
is($n{rows}, $n{claims}, 'one outbox row per committed claim');
is($n{decoded_rows}, $n{claims}, 'the slot decoded one INSERT per committed claim');
is($n{decoded_distinct}, $n{claims}, 'no message id decoded twice');
is($n{decoded_messages}, $n{claims}, 'the slot decoded one logical message per committed claim');
is($n{rows_debezium}, $n{claims}, 'one row of the Debezium-only topic per committed claim, not pulled');
is($n{decoded_debezium}, $n{claims}, 'the slot decoded each committed claim\'s message of the Debezium-only topic');
is($n{decoded_debezium_all}, $n{claims}, 'and nothing else of that topic');
is($node->safe_psql('postgres', q{SELECT count(*) FROM idem_outbox_aggregates WHERE topic = 'tapd'}),
	'0', 'the Debezium-only topic took no aggregate lock');
is($n{rows_q}, $n{claims}, 'one pulled row of the topic without a group per committed claim');
is($n{decoded_q}, $n{claims}, 'the slot decoded each committed claim\'s message of that topic');
is($n{decoded_q_all}, $n{claims}, 'and nothing else of it');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM idem_outbox_aggregates WHERE topic = 'tapq')
	     = (SELECT count(DISTINCT aggregate) FROM idem_outbox WHERE topic = 'tapq')}),
	't', 'one lock row per aggregate of that topic');
is($n{decoded_messages_distinct}, $n{claims}, 'no logical message twice');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM claims c WHERE NOT EXISTS (SELECT FROM decoded_rows d WHERE d.id = c.id))
	    || '|' || (SELECT count(*) FROM claims c WHERE NOT EXISTS (SELECT FROM decoded_messages d WHERE (d.m->>'id')::uuid = c.id))
	    || '|' || (SELECT count(*) FROM decoded_rows d WHERE d.topic = 'tap' AND NOT EXISTS (SELECT FROM claims c WHERE c.id = d.id))
	    || '|' || (SELECT count(*) FROM idem_outbox o WHERE o.topic = 'tap' AND NOT EXISTS (SELECT FROM claims c WHERE c.id = o.id))}),
	'0|0|0|0', 'decoded ids, message ids and table ids are exactly those of the committed claims');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM idem_records WHERE scope = 'tap' AND key ~ '7$')
	    || '|' || (SELECT count(*) FROM effects WHERE k % 10 = 7)
	    || '|' || (SELECT count(*) FROM decoded_messages WHERE m->>'key' ~ '7$')
	    || '|' || (SELECT count(*) FROM idem_outbox WHERE key ~ '7$')}),
	'0|0|0|0', 'rolled-back claims left no record, effect or message, decoded or not');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM decoded_messages d JOIN idem_outbox o ON o.id = (d.m->>'id')::uuid
	 WHERE d.m->>'aggregate' IS DISTINCT FROM o.aggregate OR d.m->'payload' IS DISTINCT FROM o.payload
	    OR d.m->>'scope' IS DISTINCT FROM 'tap' OR d.m->>'key' IS DISTINCT FROM o.key}),
	'0', 'each logical message carries its row');

# Commit order: within each aggregate, the decoded order (commit order) is
# the order of positions, relayed by both ('tap') and by the table ('tapq').
for my $topic ('tap', 'tapq')
{
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (
		    SELECT o.position < lag(o.position) OVER (PARTITION BY o.aggregate ORDER BY d.n) AS back
		      FROM decoded_rows d JOIN idem_outbox o USING (id) WHERE o.topic = '$topic') AS x
		 WHERE back}),
		'0', "per aggregate, positions of topic $topic follow the commit order");
}

# --- the consumers ------------------------------------------------------------
# The third topic's group, drained by one consumer: fetch, record, acknowledge.
$node->safe_psql('postgres', q{
CREATE TABLE qapplied (batch int, n bigint, id uuid NOT NULL, aggregate text, position bigint);
DO $$
DECLARE
    ids uuid[];
    b int := 0;
BEGIN
    LOOP
        b := b + 1;
        INSERT INTO qapplied (batch, n, id, aggregate, position)
        SELECT b, f.n, f.id, f.aggregate, (SELECT o.position FROM idem_outbox o WHERE o.id = f.id)
          FROM idem_outbox_fetch('tapqg', 100)
               WITH ORDINALITY AS f(id, topic, aggregate, type, payload, headers, created_at, attempts, n);
        SELECT array_agg(q.id) INTO ids FROM qapplied q WHERE q.batch = b;
        EXIT WHEN ids IS NULL;
        PERFORM idem_outbox_ack_many('tapqg', ids);
    END LOOP;
END $$;});
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM qapplied) || '|' || (SELECT count(DISTINCT id) FROM qapplied)
	    || '|' || (SELECT count(*) FROM idem_outbox o WHERE o.topic = 'tapq' AND NOT EXISTS (SELECT FROM qapplied q WHERE q.id = o.id))
	    || '|' || (SELECT count(*) FROM (SELECT position < lag(position) OVER (PARTITION BY aggregate ORDER BY batch, n) AS back FROM qapplied) x WHERE back)
	    || '|' || (SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'tapqg')}),
	"$n{claims}|$n{claims}|0|0|0", 'the third topic\'s group got every message once, in order per aggregate');

is($n{applied}, $n{claims}, 'every message applied at the inbox');
is($n{applied_distinct}, $n{applied}, 'no message applied twice');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	    SELECT position < lag(position) OVER (PARTITION BY aggregate ORDER BY seq) AS back
	      FROM applied) AS x
	 WHERE back}),
	'0', 'per aggregate, messages were applied in commit order');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM idem_records
	 WHERE scope = 'inbox:tapc' AND key::uuid NOT IN (SELECT id FROM applied)}),
	'0', 'the inbox holds exactly the applied message ids');
my $redelivered = $node->safe_psql('postgres', 'SELECT count(*) FROM redeliveries');
cmp_ok($redelivered, '>=', 1, "redelivered messages were recognised by the inbox ($redelivered)");
is( $node->safe_psql('postgres', q{
	SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'tapc'}),
	'0', 'the group acknowledged everything');

# --- pg_dump keeps the outbox ---------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT idem_outbox_subscribe('late', 'tap');
	SELECT idem_outbox_topic('dumped', retention => '1 day');
	SELECT idem_publish('tap', '{}', key => 'before-dump');});
my $dump = "$dir/outbox.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'pg_restore');
my $state = q{
	SELECT (SELECT count(*) FROM idem_outbox) || '|' || (SELECT count(*) FROM idem_outbox_topics)
	    || '|' || (SELECT string_agg(consumer || ':' || topic, ',' ORDER BY consumer) FROM idem_outbox_subscriptions)
	    || '|' || (SELECT count(*) FROM idem_outbox_runs)
	    || '|' || (SELECT max(position) FROM idem_outbox)};
is($node->safe_psql('restored', $state), $node->safe_psql('postgres', $state),
	'the restored database has the outbox, its topics, subscriptions and runs');
is( $node->safe_psql('restored', q{
	SELECT idem_publish('tap', '{}', key => 'after-restore') IS NOT NULL;
	SELECT idem_publish('tap', '{}', key => 'before-dump') IS NULL;
	SELECT (SELECT position FROM idem_outbox WHERE key = 'after-restore')
	       > (SELECT max(position) FROM idem_outbox WHERE key <> 'after-restore')}),
	"t\nt\nt", 'after the restore, positions go on and ids stay duplicates');

$node->stop;
done_testing();
