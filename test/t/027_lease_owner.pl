# Leases bound to their owner's session (idem_begin(..., bind_to_session
# => true)): when that session ends, a waiter takes the lease over at
# once instead of after the lease's time.  Every lease here is 5 minutes
# long and each takeover is asserted while minutes of it were left, so no
# timing is asserted; a takeover that waited for the lease's end would hit
# statement_timeout (2 minutes) instead.
#   bound:   the owner's backend killed with kill -9 (crash and restart),
#            pg_terminate_backend, the client disconnecting, a server
#            restart: the next idem_begin takes over (a waiter in
#            idem_await returns first, where one can wait through it);
#   unbound: none of these shortens the lease, nor a connection that ended
#            right after idem_begin;
#   a live but slow owner is never taken over before its lease ends, and
#            is taken over by time once it has;
#   a pid that a new backend reuses is not the owner;
#   the dead owner's token stays fenced off, a prepared transaction of
#            the dead owner included.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('owner');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
max_prepared_transactions = 5
restart_after_crash = on
statement_timeout = '120s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

# An owner: a session that begins a 5-minute lease on key and stays
# connected.  Returns the session, the token and its backend's pid.
sub owner
{
	my ($key, $bind) = @_;
	my $s = $node->background_psql('postgres');
	my $out = $s->query_safe(
		"SELECT token || ':' || pg_backend_pid() FROM idem_begin('w', '$key', lease => '5 minutes', bind_to_session => $bind)"
	);
	my ($token, $pid) = $out =~ /(\d+):(\d+)/ or die "no token for $key: $out";
	return ($s, $token, $pid);
}

# A waiter in idem_await (4 minutes at most) on key, in its own session.
sub waiter
{
	my ($key) = @_;
	my $s = $node->background_psql('postgres');
	$s->query_until(qr/waiting/, qq(\\echo waiting
SELECT 'await:' || status || ':' || (locked_until > clock_timestamp() + interval '4 minutes')::text
  FROM idem_await('w', '$key', '4 minutes');
));
	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Extension' AND query LIKE '%idem_await(''w'', ''$key''%'}),
		"$key: a waiter waits in idem_await");
	return $s;
}

# The lease on key still has minutes left (asserted before a takeover).
sub minutes_left
{
	my ($key) = @_;
	return $node->safe_psql('postgres',
		"SELECT locked_until > clock_timestamp() + interval '4 minutes' FROM idem_records WHERE key = '$key'"
	);
}

# What the next worker's idem_begin says: outcome, attempt, effect_unknown.
sub next_begin
{
	my ($key) = @_;
	return $node->safe_psql('postgres',
		"SELECT concat_ws(':', outcome, attempt, effect_unknown) FROM idem_begin('w', '$key', lease => '5 minutes')"
	);
}

# Wait until no backend has pid any more.
sub gone
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid did not go";
}

# --- pg_terminate_backend -------------------------------------------------
{
	my ($s, $token, $pid) = owner('term', 'true');
	my ($u, $utoken, $upid) = owner('term-u', 'false');
	is( $node->safe_psql(
			'postgres',
			"SELECT string_agg((owner_pid IS NULL)::text, ',' ORDER BY key) FROM idem_records WHERE key IN ('term', 'term-u')"
		),
		'false,true',
		'a bound lease records its owner, an unbound one none');
	my $w = waiter('term');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($pid, $upid)");
	gone($pid);
	gone($upid);
	like($w->query_safe("SELECT 'after'"),
		qr/await:in_progress:true/,
		'terminated owner: the waiter returns with minutes of the lease left');
	$w->quit;
	is(next_begin('term'), 'acquired:2:f',
		'terminated owner (bound): taken over at once, a clean retry');
	is(next_begin('term-u'), 'in_progress',
		'terminated owner (unbound): the lease still holds');
	my ($ret, $o, $err) = $node->psql('postgres',
		"SELECT idem_finish('w', 'term', $token, '{\"late\": true}')");
	like($err, qr/lease lost/, "the terminated owner's token is fenced off");
	eval { $s->quit };
	eval { $u->quit };
}

# --- client disconnect, and a connection that ended right after begin ----
{
	my ($s, $token, $pid) = owner('disc', 'true');
	my ($u, $utoken, $upid) = owner('disc-u', 'false');
	my $w = waiter('disc');
	$s->quit;
	$u->quit;
	gone($pid);
	gone($upid);
	like($w->query_safe("SELECT 'after'"),
		qr/await:in_progress:true/,
		'disconnected owner: the waiter returns with minutes of the lease left');
	$w->quit;
	is(next_begin('disc'), 'acquired:2:f',
		'disconnected owner (bound): taken over at once');
	is(next_begin('disc-u'), 'in_progress',
		'disconnected owner (unbound): the lease still holds');

	$node->safe_psql('postgres',
		"SELECT outcome FROM idem_begin('w', 'oneshot', lease => '5 minutes')");
	is(next_begin('oneshot'), 'in_progress',
		'a connection that ended right after an unbound idem_begin: the lease holds');
}

# --- a live, slow owner ----------------------------------------------------
{
	my ($s, $token, $pid) = owner('slow', 'true');
	is(next_begin('slow'), 'in_progress',
		'live owner: never taken over while its lease lasts');
	is( $node->safe_psql(
			'postgres',
			"SELECT status || ':' || (locked_until > clock_timestamp())::text FROM idem_await('w', 'slow', '200 milliseconds')"
		),
		'in_progress:true',
		'live owner: a waiter waits out its own timeout, the lease still on');
	# The mark says nothing while the owner lives.
	$s->query_safe("SELECT idem_effect_started('w', 'slow', $token)");
	is(next_begin('slow'), 'in_progress', 'live owner after its mark: still its lease');
	$s->query_safe("SELECT idem_finish('w', 'slow', $token, '{\"done\": 1}')");
	is(next_begin('slow'), 'completed', 'the live owner finishes');

	# A live owner whose lease has ended is taken over by time.
	my $out = $s->query_safe(
		"SELECT token FROM idem_begin('w', 'slow-2', lease => '1 second', bind_to_session => true)");
	$node->poll_query_until('postgres',
		"SELECT locked_until < clock_timestamp() FROM idem_records WHERE key = 'slow-2'")
	  or die 'lease did not end';
	is(next_begin('slow-2'), 'acquired:2:f',
		'live owner whose lease ended: taken over by time');
	$s->quit;
}

# --- a pid reused by a new backend ---------------------------------------
{
	# The owner's pid is a live backend's, but that backend started at
	# another time: it is not the owner (what a reused pid looks like).
	my $other = $node->background_psql('postgres');
	my $opid = $other->query_safe('SELECT pg_backend_pid()');
	$node->safe_psql(
		'postgres', qq{
SELECT outcome FROM idem_begin('w', 'reuse', lease => '5 minutes', bind_to_session => true);
SELECT outcome FROM idem_begin('w', 'same', lease => '5 minutes', bind_to_session => true);
UPDATE idem_records r SET owner_pid = a.pid, owner_start = a.backend_start - interval '1 second'
  FROM pg_stat_activity a WHERE a.pid = $opid AND r.key = 'reuse';
UPDATE idem_records r SET owner_pid = a.pid, owner_start = a.backend_start
  FROM pg_stat_activity a WHERE a.pid = $opid AND r.key = 'same';
});
	is(minutes_left('reuse'), 't', 'reused pid: minutes of the lease left');
	is(next_begin('reuse'), 'acquired:2:f',
		'a live backend that reuses the pid is not the owner');
	is(next_begin('same'), 'in_progress',
		'the live backend with the same pid and start is the owner');
	$other->quit;
}

# --- mark, then die: the next owner is told the effect is unknown ---------
{
	my ($s, $token, $pid) = owner('marked', 'true');
	$s->query_safe("SELECT idem_effect_started('w', 'marked', $token)");
	my ($s2, $token2, $pid2) = owner('unmarked', 'true');
	$node->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($pid, $pid2)");
	gone($pid);
	gone($pid2);
	is(minutes_left('marked'), 't', 'marked: minutes of the lease left');
	is(next_begin('marked'), 'acquired:2:t',
		'owner died after its mark: the next owner is told the effect is unknown');
	is(next_begin('unmarked'), 'acquired:2:f',
		'owner died before its mark: a clean retry');
	eval { $s->quit };
	eval { $s2->quit };
}

# --- a prepared transaction of the dead owner -------------------------------
{
	my ($s, $token, $pid) = owner('prep', 'true');
	$s->query_safe(
		"BEGIN; SELECT idem_finish('w', 'prep', $token, '{\"by\": \"dead\"}'); PREPARE TRANSACTION 'dead_owner'"
	);
	my ($s2, $token2, $pid2) = owner('prep-2', 'true');
	$s2->query_safe(
		"BEGIN; SELECT idem_finish('w', 'prep-2', $token2, '{\"by\": \"dead\"}'); PREPARE TRANSACTION 'dead_owner_2'"
	);
	$node->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($pid, $pid2)");
	gone($pid);
	gone($pid2);

	# The new worker waits for the prepared finish, which holds the record.
	my $b = $node->background_psql('postgres');
	$b->query_until(qr/begun/, q(\echo begun
SELECT 'begin:' || concat_ws(':', outcome, attempt, effect_unknown) FROM idem_begin('w', 'prep', lease => '5 minutes');
));
	ok( $node->poll_query_until(
			'postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%idem_begin(''w'', ''prep''%'}),
		"a takeover waits for the dead owner's prepared finish");
	$node->safe_psql('postgres', "ROLLBACK PREPARED 'dead_owner'");
	like($b->query_safe("SELECT 'after'"), qr/begin:acquired:2:f/,
		'the prepared finish rolled back: taken over');
	$b->quit;
	my ($ret, $o, $err) = $node->psql('postgres',
		"SELECT idem_finish('w', 'prep', $token, '{\"late\": true}')");
	like($err, qr/lease lost/, "the dead owner's late finish is fenced off");

	# Committed, the dead owner's prepared finish is the outcome.
	$node->safe_psql('postgres', "COMMIT PREPARED 'dead_owner_2'");
	is(next_begin('prep-2'), 'completed',
		"the dead owner's committed prepared finish stands");
	eval { $s->quit };
	eval { $s2->quit };
}

# --- kill -9 of the owner's backend (crash and restart) --------------------
{
	my ($s, $token, $pid) = owner('kill9', 'true');
	my ($u, $utoken, $upid) = owner('kill9-u', 'false');
	kill 'KILL', $pid;
	eval { $s->quit };
	eval { $u->quit };
	# The postmaster reinitializes; wait until it accepts connections.
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'server did not come back';
	is(minutes_left('kill9'), 't', 'kill -9: minutes of the lease left');
	is(next_begin('kill9'), 'acquired:2:f',
		'owner killed with kill -9 (bound): taken over at once');
	is(next_begin('kill9-u'), 'in_progress',
		'owner killed with kill -9 (unbound): the lease still holds');
	my ($ret, $o, $err) = $node->psql('postgres',
		"SELECT idem_finish('w', 'kill9', $token, '{\"late\": true}')");
	like($err, qr/lease lost/, "the killed owner's token is fenced off");
}

# --- server restart ----------------------------------------------------------
{
	# The owners stay connected: the restart (fast shutdown) ends them.
	my ($s, $token, $pid) = owner('restart', 'true');
	my ($u, $utoken, $upid) = owner('restart-u', 'false');
	$node->restart;
	eval { $s->quit };
	eval { $u->quit };
	is(minutes_left('restart'), 't', 'restart: minutes of the lease left');
	is(next_begin('restart'), 'acquired:2:f',
		'server restart (bound): taken over at once');
	is(next_begin('restart-u'), 'in_progress',
		'server restart (unbound): the lease still holds');
}

$node->stop;
done_testing();
