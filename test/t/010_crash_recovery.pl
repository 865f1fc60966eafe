# Crash recovery.  A pgbench workload runs claims, batch claims, one-time
# token consumption and two-phase leased work (with random failures and
# abandoned leases), each business write in the same transaction as the
# idempotency call that allows it.  Mid-run the server crashes:
#   round 1  the postmaster is killed with SIGKILL (kill -9),
#   round 2  one busy backend is killed with SIGKILL, so the postmaster
#            kills every other backend and runs crash recovery itself.
# After each restart the invariants hold:
#   - every committed business effect has exactly one record saying it
#     was done, and every such record has exactly one effect;
#   - no record is half-written (each status has exactly the fields it
#     must have), no claim committed without the write it guarded;
#   - a transaction in flight at the crash left nothing; a prepared
#     transaction kept its claim and commits it afterwards;
#   - fencing tokens are never reissued: new tokens are greater than
#     every token issued before the crash;
#   - leases survive the crash: a live lease still says in_progress, and
#     the in_progress records of dead workers are taken over once their
#     lease has run out (the old token then fails with ID003);
#   - the table, its indexes and their TOAST pass amcheck (verify_heapam,
#     bt_index_parent_check with heapallindexed).
# SOAK=1 runs more crash rounds with longer workloads.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $soak    = $ENV{SOAK} ? 1 : 0;
my $rounds  = $soak ? 6 : 2;
my $clients = 8;
# Key spaces large enough that no round runs out of fresh keys.
my $nkeys  = $soak ? 500000 : 20000;    # one-phase and batch keys
my $nkeys2 = $soak ? 50000  : 2000;     # two-phase keys: more overlap
my $ntokens = 400;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf(
	'postgresql.conf', qq{
max_connections = 40
max_prepared_transactions = 5
restart_after_crash = on
log_statement = none
# A safety net: a statement stuck on a lock fails the test instead of
# hanging it.
statement_timeout = '120s'
});
$node->start;

$node->safe_psql(
	'postgres', qq{
CREATE EXTENSION idempotency;
CREATE EXTENSION amcheck;
-- Business effects.  No unique constraint: an effect applied twice must
-- show up here rather than fail.
CREATE TABLE effects (
    scope  text NOT NULL,
    key    text NOT NULL,
    client int NOT NULL,
    token  bigint
);
CREATE INDEX ON effects (scope, key);
-- One-time tokens handed out before the run.
CREATE TABLE tokens (id int PRIMARY KEY, token text NOT NULL);
INSERT INTO tokens SELECT i, idem_token_issue('tok', '1 day')
FROM generate_series(1, $ntokens) AS i;

-- The second phase of leased work, in one transaction: the business write
-- and idem_finish commit together or not at all.  roll 1: retryable
-- failure; 2: permanent failure; 3: the worker dies (its lease runs out);
-- 4: an error after the write and the finish (both roll back, the lease
-- stays); otherwise the work is done.  A lease lost to a takeover (ID003)
-- undoes the write.
CREATE FUNCTION work_two(p_key text, p_token bigint, p_client int, p_roll int)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM pg_sleep(p_roll * 0.0005);        -- the outside call
    IF p_roll = 1 THEN
        PERFORM idem_fail('two', p_key, p_token, '{"error": "transient"}', true);
        RETURN 'retryable';
    ELSIF p_roll = 2 THEN
        PERFORM idem_fail('two', p_key, p_token, '{"error": "permanent"}', false);
        RETURN 'failed';
    ELSIF p_roll = 3 THEN
        RETURN 'abandoned';
    END IF;
    BEGIN
        INSERT INTO effects (scope, key, client, token)
        VALUES ('two', p_key, p_client, p_token);
        PERFORM idem_finish('two', p_key, p_token,
                            jsonb_build_object('token', p_token, 'client', p_client));
        IF p_roll = 4 THEN
            RAISE EXCEPTION 'worker failed after finishing' USING ERRCODE = 'P0001';
        END IF;
    EXCEPTION WHEN SQLSTATE 'P0001' THEN
        RETURN 'rolled back';
    END;
    RETURN 'completed';
EXCEPTION WHEN SQLSTATE 'ID003' THEN
    RETURN 'lease lost';
END \$\$;

-- Every invariant, as (what, number of violations).
CREATE FUNCTION violations() RETURNS TABLE (what text, n bigint)
LANGUAGE sql AS \$\$
    SELECT 'effect applied twice', count(*)
    FROM (SELECT 1 FROM effects GROUP BY scope, key HAVING count(*) > 1) AS d
  UNION ALL
    SELECT 'effect without the record of its work', count(*)
    FROM effects e
    WHERE NOT EXISTS (
        SELECT 1 FROM idem_records r
        WHERE r.scope = e.scope AND r.key = e.key
          AND r.status = CASE e.scope WHEN 'one' THEN 'completed'
                                      WHEN 'many' THEN 'claimed'
                                      WHEN 'two' THEN 'completed'
                                      WHEN 'tok' THEN 'consumed'
                                      WHEN 'prep' THEN 'claimed' END)
  UNION ALL
    SELECT 'record of work without its effect', count(*)
    FROM idem_records r
    WHERE r.scope <> 'fresh' AND r.status IN ('claimed', 'completed', 'consumed')
      AND NOT EXISTS (SELECT 1 FROM effects e
                      WHERE e.scope = r.scope AND e.key = r.key)
  UNION ALL
    SELECT 'one-phase claim committed without idem_complete', count(*)
    FROM idem_records WHERE scope = 'one' AND status <> 'completed'
  UNION ALL
    SELECT 'two-phase effect of another token than the finishing one', count(*)
    FROM idem_records r JOIN effects e USING (scope, key)
    WHERE r.scope = 'two'
      AND (r.token IS DISTINCT FROM e.token
           OR (r.result->>'token')::bigint IS DISTINCT FROM e.token)
  UNION ALL
    SELECT 'effect of an in-progress, retryable or failed record', count(*)
    FROM idem_records r JOIN effects e USING (scope, key)
    WHERE r.status IN ('in_progress', 'retryable', 'failed')
  UNION ALL
    SELECT 'half-written record', count(*)
    FROM idem_records r
    WHERE r.scope <> 'fresh' AND NOT coalesce(
        r.created_at <= r.updated_at AND r.expires_at > r.created_at
        AND CASE r.status
            WHEN 'claimed' THEN r.scope IN ('one', 'many', 'prep')
                 AND r.token IS NULL AND r.locked_until IS NULL
                 AND r.result IS NULL
            WHEN 'completed' THEN r.locked_until IS NULL
                 AND CASE WHEN r.scope = 'two'
                          THEN r.token IS NOT NULL AND r.attempts >= 1
                               AND r.result ? 'token'
                          ELSE r.token IS NULL AND r.result ? 'client' END
            WHEN 'in_progress' THEN r.scope = 'two' AND r.token IS NOT NULL
                 AND r.locked_until IS NOT NULL AND r.result IS NULL
                 AND r.attempts >= 1 AND r.lease IS NOT NULL
            WHEN 'retryable' THEN r.scope = 'two' AND r.token IS NOT NULL
                 AND r.locked_until IS NULL
                 AND r.result = '{"error": "transient"}'
            WHEN 'failed' THEN r.scope = 'two' AND r.token IS NOT NULL
                 AND r.locked_until IS NULL
                 AND r.result = '{"error": "permanent"}'
            WHEN 'issued' THEN r.scope = 'tok' AND r.token IS NULL
            WHEN 'consumed' THEN r.scope = 'tok' AND r.token IS NULL
            ELSE false END, false)
  UNION ALL
    SELECT 'issued token lost', count(*)
    FROM tokens t
    WHERE NOT EXISTS (SELECT 1 FROM idem_records r
                      WHERE r.scope = 'tok' AND r.key = t.token
                        AND r.status IN ('issued', 'consumed'))
  UNION ALL
    SELECT 'fencing token held by two records', count(*)
    FROM (SELECT 1 FROM idem_records WHERE token IS NOT NULL
          GROUP BY token HAVING count(*) > 1) AS d
  UNION ALL
    SELECT 'token sequence behind an issued token', count(*)
    FROM (SELECT token FROM idem_records UNION ALL SELECT token FROM effects) AS t
    WHERE t.token > (SELECT last_value FROM idem_token_seq)
\$\$;

-- amcheck on every relation of the test: the heap and its TOAST
-- (verify_heapam), every btree index against its heap (heapallindexed);
-- with parent, also the parent/child invariants (which need a ShareLock,
-- so not while a prepared transaction holds the tables).
CREATE FUNCTION amcheck_all(parent boolean) RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE
    rel regclass;
    idx regclass;
    problems bigint := 0;
BEGIN
    FOREACH rel IN ARRAY ARRAY['idem_records', 'effects', 'tokens']::regclass[] LOOP
        problems := problems + (SELECT count(*) FROM verify_heapam(rel, check_toast => true));
        FOR idx IN SELECT indexrelid FROM pg_index WHERE indrelid = rel LOOP
            PERFORM bt_index_check(idx, true);
            IF parent THEN
                PERFORM bt_index_parent_check(idx, true, true);
            END IF;
        END LOOP;
    END LOOP;
    RETURN problems;
END \$\$;
});

my %scripts = (
	one => qq{
\\set k random(1, $nkeys)
BEGIN;
SELECT idem_claim('one', 'k' || :k) AS owned \\gset
\\if :owned
INSERT INTO effects (scope, key, client) VALUES ('one', 'k' || :k, :client_id);
SELECT idem_complete('one', 'k' || :k, jsonb_build_object('client', :client_id));
\\endif
COMMIT;
},
	many => qq{
\\set b random(1, $nkeys)
BEGIN;
INSERT INTO effects (scope, key, client)
SELECT 'many', m.key, :client_id
FROM idem_claim_many('many', ARRAY['k' || :b, 'k' || (:b + 7), 'k' || ((:b * 3) % $nkeys), 'k' || :b]) AS m
WHERE m.claimed;
COMMIT;
},
	two => qq{
\\set k random(1, $nkeys2)
\\set roll random(0, 12)
SELECT coalesce((SELECT b.token FROM idem_begin('two', 'k' || :k, lease => '2 seconds') AS b
                 WHERE b.outcome = 'acquired'), 0) AS tok \\gset
\\if :tok > 0
SELECT work_two('k' || :k, :tok, :client_id, :roll);
\\endif
},
	tok => qq{
\\set t random(1, $ntokens)
BEGIN;
INSERT INTO effects (scope, key, client)
SELECT 'tok', t.token, :client_id FROM tokens t
WHERE t.id = :t AND idem_token_consume('tok', t.token);
COMMIT;
},);

my $dir = PostgreSQL::Test::Utils::tempdir;
my @script_args;
for my $name (sort keys %scripts)
{
	my $file = "$dir/$name.sql";
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh $scripts{$name};
	close $fh;
	my $weight = { one => 4, many => 2, two => 4, tok => 1 }->{$name};
	push @script_args, '-f', "$file\@$weight";
}

sub start_pgbench
{
	my ($out, $err) = ('', '');
	local $ENV{PGAPPNAME} = 'crash_workload';
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', $clients, '-j', 2, '-T', ($soak ? 600 : 180),
			'-h', $node->host, '-p', $node->port, @script_args, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return ($h, \$out, \$err);
}

sub stop_pgbench
{
	my ($h, $err) = @_;
	# Its connections are gone: pgbench ends by itself, soon.
	my $deadline = time + 60;
	while ($h->pumpable && time < $deadline)
	{
		$h->pump_nb;
		usleep(100_000);
	}
	$h->kill_kill if $h->pumpable;
	eval { $h->finish };
	note "pgbench after the crash: " . (substr($$err, -400) // '');
	return;
}

sub effect_counts
{
	return split /\|/, $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE scope = 'one'),
		         count(*) FILTER (WHERE scope = 'many'),
		         count(*) FILTER (WHERE scope = 'two'),
		         count(*) FILTER (WHERE scope = 'tok')
		  FROM effects});
}

sub check_invariants
{
	my ($when, $parent) = @_;
	my $bad = $node->safe_psql('postgres',
		q{SELECT string_agg(what || ': ' || n, ', ') FROM violations() WHERE n > 0});
	is($bad, '', "$when: every invariant holds");
	is($node->safe_psql('postgres', "SELECT amcheck_all($parent)"),
		'0', "$when: amcheck finds no corruption");
	return;
}

# Wait until no process of the killed server is left (they notice the
# postmaster's death and exit), so that the new postmaster can start.
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

my $last_token = 0;

for my $round (1 .. $rounds)
{
	my $mode = $round % 2 ? 'postmaster' : 'backend';
	my $tag  = "round $round ($mode killed)";

	# Deterministic leftovers at the moment of the crash, besides whatever
	# the workload has in flight:
	# - a committed lease that will run out, and one that will not;
	$node->safe_psql('postgres', qq{
		SELECT idem_begin('two', 'abandoned-$round', lease => '3 seconds');
		SELECT idem_begin('two', 'held-$round', lease => '1 hour');});
	# - a prepared transaction holding a claim and its effect;
	$node->safe_psql('postgres', qq{
		BEGIN;
		SELECT idem_claim('prep', 'prepared-$round');
		INSERT INTO effects (scope, key, client) VALUES ('prep', 'prepared-$round', -1);
		PREPARE TRANSACTION 'crash_$round';});
	# - an open transaction that has claimed a key and written its effect.
	my $inflight = $node->background_psql('postgres');
	$inflight->query_safe(qq{
		BEGIN;
		SELECT idem_claim('one', 'inflight-$round');
		INSERT INTO effects (scope, key, client) VALUES ('one', 'inflight-$round', -1);
		SELECT idem_complete('one', 'inflight-$round', '{"client": -1}');});

	my @before = effect_counts();
	my $log_offset = -s $node->logfile;
	my ($h, $out, $err) = start_pgbench();

	# Let the workload get going: every kind of work has made progress.
	my $progress = sprintf(
		q{SELECT count(*) FILTER (WHERE scope = 'one') >= %d
		     AND count(*) FILTER (WHERE scope = 'many') >= %d
		     AND count(*) FILTER (WHERE scope = 'two') >= %d
		   FROM effects},
		$before[0] + 600 * ($soak ? 5 : 1),
		$before[1] + 300 * ($soak ? 5 : 1),
		$before[2] + 150 * ($soak ? 5 : 1));
	ok($node->poll_query_until('postgres', $progress),
		"$tag: the workload is running");

	if ($mode eq 'postmaster')
	{
		my $postmaster = $node->{_pid};
		$node->kill9;
		wait_for_old_processes($postmaster);
		$node->start;
	}
	else
	{
		my $pid = $node->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity
			  WHERE application_name = 'crash_workload' AND state = 'active'
			  ORDER BY query_start LIMIT 1});
		$pid = $node->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity
			  WHERE application_name = 'crash_workload' LIMIT 1})
		  if $pid eq '';
		ok($pid =~ /^\d+$/, "$tag: found a busy backend");
		kill 'KILL', $pid;
		# The postmaster kills every backend and recovers by itself; wait
		# for the restart to begin before waiting for it to end.
		$node->wait_for_log(qr/all server processes terminated; reinitializing/,
			$log_offset);
		ok($node->poll_query_until('postgres', 'SELECT 1', '1'),
			"$tag: the server is back after crash recovery");
	}
	stop_pgbench($h, $err);
	eval { $inflight->quit };

	like(slurp_file($node->logfile, $log_offset),
		($mode eq 'postmaster'
			? qr/database system was interrupted; last known up at|database system was not properly shut down/
			: qr/terminated by signal 9: Killed/),
		"$tag: the server went through crash recovery");

	my @after = effect_counts();
	cmp_ok($after[0] + $after[1] + $after[2], '>',
		$before[0] + $before[1] + $before[2],
		"$tag: effects were committed before the crash");

	check_invariants("$tag, after restart", 'false');

	# The open transaction left nothing; its key is free.
	is( $node->safe_psql('postgres', qq{
		SELECT (SELECT count(*) FROM effects WHERE key = 'inflight-$round')
		    || '|' || (SELECT count(*) FROM idem_records WHERE key = 'inflight-$round')}),
		'0|0', "$tag: the transaction in flight left no effect and no record");

	# The prepared transaction survived and still holds its key.
	is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'crash_$round'"),
		'1', "$tag: the prepared transaction survived");
	my ($ret, $stdout, $stderr) = $node->psql('postgres', qq{
		SET lock_timeout = '100ms';
		SELECT idem_claim('prep', 'prepared-$round');},
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($stderr, qr/55P03/,
		"$tag: a claim of the prepared key waits for the prepared transaction");
	$node->safe_psql('postgres', "COMMIT PREPARED 'crash_$round'");
	is( $node->safe_psql('postgres', qq{
		SELECT idem_claim('prep', 'prepared-$round')::text || '|' ||
		       (SELECT count(*) FROM effects WHERE key = 'prepared-$round')}),
		'false|1', "$tag: committed after the crash, the prepared claim is a duplicate");

	# Fencing tokens are never reissued: a new one is greater than every
	# token issued before the crash (also those of rolled-back work).
	my $max_before = $node->safe_psql('postgres', q{
		SELECT greatest((SELECT max(token) FROM idem_records),
		                (SELECT max(token) FROM effects))});
	my $new_token = $node->safe_psql('postgres', qq{
		SELECT token FROM idem_begin('fresh', 'after-$round')});
	cmp_ok($new_token, '>', $max_before,
		"$tag: a new fencing token is greater than every token before the crash");
	cmp_ok($new_token, '>', $last_token,
		"$tag: tokens grow across rounds");
	$last_token = $new_token;
	$node->safe_psql('postgres',
		qq{SELECT idem_finish('fresh', 'after-$round', $new_token)});

	# A lease that has not run out survives the crash.
	is( $node->safe_psql('postgres', qq{
		SELECT outcome || '|' || idem_claim('two', 'held-$round')::text
		FROM idem_begin('two', 'held-$round')}),
		'in_progress|false', "$tag: a live lease still holds its key after the crash");

	# Every in_progress record of a dead worker is taken over once its
	# lease has run out; the dead worker's token then fails with ID003.
	my $leftovers = $node->safe_psql('postgres', q{
		SELECT count(*) FROM idem_records
		WHERE status = 'in_progress' AND locked_until < now() + interval '10 minutes'});
	cmp_ok($leftovers, '>=', 1, "$tag: dead workers left in_progress records ($leftovers)");
	ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM idem_records
		WHERE status = 'in_progress' AND locked_until > clock_timestamp()
		  AND locked_until < clock_timestamp() + interval '10 minutes'}),
		"$tag: the short leases ran out");
	my $takeover = $node->safe_psql('postgres', q{
		CREATE TEMP TABLE takeover AS
		SELECT r.key, r.token AS old_token, b.outcome, b.token AS new_token
		FROM idem_records r
		CROSS JOIN LATERAL idem_begin('two', r.key, lease => '1 minute') AS b
		WHERE r.scope = 'two' AND r.status = 'in_progress'
		  AND r.locked_until <= clock_timestamp();
		-- The dead workers' tokens are fenced off.
		CREATE FUNCTION pg_temp.stale_finish(k text, t bigint) RETURNS text
		LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM idem_finish('two', k, t, '{"stale": true}');
		    RETURN 'finished';
		EXCEPTION WHEN SQLSTATE 'ID003' THEN
		    RETURN 'ID003';
		END $$;
		SELECT count(*) || '|' ||
		       count(*) FILTER (WHERE outcome = 'acquired' AND new_token > old_token) || '|' ||
		       count(*) FILTER (WHERE pg_temp.stale_finish(key, old_token) = 'ID003') || '|' ||
		       count(*) FILTER (WHERE work_two(key, new_token, 0, 12) = 'completed')
		FROM takeover;});
	my ($n, $acquired, $fenced, $done) = split /\|/, $takeover;
	cmp_ok($n, '>=', 1, "$tag: in_progress records to take over ($n)");
	is($acquired, $n, "$tag: every run-out lease was acquired with a greater token");
	is($fenced, $n, "$tag: every dead worker's token fails with ID003");
	is($done, $n, "$tag: the new owners finished the work");
	is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM idem_records
		WHERE status = 'in_progress' AND locked_until <= clock_timestamp()}),
		'0', "$tag: no abandoned lease is left");

	check_invariants("$tag, after the takeovers", 'true');
}

# The checker itself is not vacuous: planted damage of each kind is
# reported (and rolled back).
is( $node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO effects SELECT scope, key, client, token FROM effects
	WHERE scope = 'one' LIMIT 1;                          -- applied twice
	INSERT INTO effects VALUES ('many', 'never-claimed', 0);  -- no record
	DELETE FROM effects WHERE ctid = (SELECT ctid FROM effects
	                                  WHERE scope = 'tok' LIMIT 1);  -- lost
	UPDATE idem_records SET status = 'claimed'
	WHERE scope = 'one' AND key = (SELECT min(key) FROM idem_records
	                               WHERE scope = 'one');  -- not completed
	UPDATE idem_records SET locked_until = NULL
	WHERE scope = 'two' AND key = (SELECT min(key) FROM idem_records
	                               WHERE scope = 'two' AND status = 'in_progress');
	SELECT string_agg(what, ', ' ORDER BY what) FROM violations() WHERE n > 0;
	ROLLBACK;}),
	'effect applied twice, effect without the record of its work, '
	  . 'half-written record, one-phase claim committed without idem_complete, '
	  . 'record of work without its effect',
	'the invariant checker reports planted damage');
check_invariants('after the planted damage was rolled back', 'true');

# Finally, every key is still claimed at most once: a pass over all
# one-phase keys claims exactly those without a record.
my ($free, $claimed_now) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT (SELECT count(*) FROM generate_series(1, $nkeys) AS i
	        WHERE NOT EXISTS (SELECT 1 FROM idem_records
	                          WHERE scope = 'one' AND key = 'k' || i)),
	       (SELECT count(*) FILTER (WHERE idem_claim('one', 'k' || i))
	        FROM generate_series(1, $nkeys) AS i)});
is($claimed_now, $free, 'after all crashes exactly the unclaimed keys are free');

$node->stop;
done_testing();
