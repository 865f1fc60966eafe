# Concurrency soak, bounded in time: 10 pgbench clients on a small key
# space (heavy overlap) mix every kind of idempotent work at once:
#   one    idem_claim + business write + idem_complete, READ COMMITTED
#   rr     the same keys under REPEATABLE READ (40001 is retried)
#   many   idem_claim_many over overlapping batches in random order
#   two    idem_begin / idem_finish / idem_fail with 1-second leases,
#          abandoned leases, takeovers, and idem_claim on the same keys
#   tok    idem_token_consume of tokens issued beforehand
#   order  events on orders guarded by a state machine (idem_guard with a
#          version column and history), through plain UPDATEs, through
#          idem_transition, and inserts in legal and illegal states
#   noise  short-lived claims that expire while idem_purge runs
# At the end:
#   - every business effect happened exactly once per distinct key, and
#     exactly the keys with a record of done work have one;
#   - every token was consumed at most once, with one effect each;
#   - every status change any order went through is a declared
#     transition (an independent audit trigger and the guard's history
#     agree), versions count the changes, and payments happened exactly
#     for the orders that were paid;
#   - pgbench saw no failed transaction (retries aside): errors other than
#     serialization failures never happened.
# SOAK=1 (or SOAK_SECONDS=N) runs longer; the default is 20 seconds.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $seconds = $ENV{SOAK_SECONDS} || ($ENV{SOAK} ? 300 : 20);
my $clients = 10;
my $nkeys   = 200;     # one-phase keys per generation, shared by one, rr, many
my $nkeys2  = 60;      # leased keys per generation
my $ntokens = 300;
my $norders = 150;

my $node = PostgreSQL::Test::Cluster->new('soak');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf(
	'postgresql.conf', qq{
max_connections = 40
log_statement = none
statement_timeout = '120s'
});
$node->start;

$node->safe_psql(
	'postgres', qq{
CREATE EXTENSION idempotency;
CREATE TABLE effects (scope text NOT NULL, key text NOT NULL, client int, token bigint);
CREATE INDEX ON effects (scope, key);
CREATE TABLE tokens (id int PRIMARY KEY, token text NOT NULL);
INSERT INTO tokens SELECT i, idem_token_issue('tok', '1 day')
FROM generate_series(1, $ntokens) AS i;

-- Orders, guarded.
SELECT idem_machine_define('order', '{
    "initial": ["new"],
    "transitions": {"new": ["paid", "cancelled"],
                    "paid": ["shipped", "refunded"],
                    "shipped": ["delivered", "refunded"],
                    "delivered": [], "cancelled": [], "refunded": []}}');
CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL,
                     version int NOT NULL DEFAULT 0);
SELECT idem_guard('orders', 'status', 'order', 'version', true);
INSERT INTO orders SELECT i, 'new' FROM generate_series(1, $norders) AS i;
CREATE SEQUENCE order_ids START ${\ ($norders + 1)};
-- The effect of paying: exactly once per paid order.
CREATE TABLE payments (id int NOT NULL, client int);
-- An audit independent of the extension: every change really made.
CREATE TABLE audit (id int, from_state text, to_state text);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO audit VALUES (NEW.id, OLD.status, NEW.status);
    RETURN NULL;
END \$\$;
CREATE TRIGGER zz_audit AFTER UPDATE ON orders FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION audit_fn();

-- An event on an order.  way 0: plain UPDATE, the guard refuses what the
-- machine does not declare; way 1: idem_transition computes the new
-- status (ID004 when undeclared).  Paying writes a payment in the same
-- transaction.  A refusal is an expected answer, not a failure.
CREATE FUNCTION order_event(p_id int, p_to text, p_way int, p_client int)
RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
    n int;
BEGIN
    IF p_way = 0 THEN
        UPDATE orders SET status = p_to WHERE id = p_id AND status <> p_to;
    ELSE
        UPDATE orders SET status = idem_transition('order', status, p_to)
        WHERE id = p_id AND status <> p_to;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 1 AND p_to = 'paid' THEN
        INSERT INTO payments VALUES (p_id, p_client);
    END IF;
    RETURN CASE WHEN n = 1 THEN 'changed' ELSE 'repeated' END;
EXCEPTION WHEN SQLSTATE 'ID004' THEN
    RETURN 'refused';
END \$\$;

CREATE FUNCTION new_order(p_status text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO orders (id, status) VALUES (nextval('order_ids'), p_status);
    RETURN 'inserted';
EXCEPTION WHEN SQLSTATE 'ID004' THEN
    RETURN 'refused';
END \$\$;

-- The second phase of leased work (see 010_crash_recovery.pl): roll 1
-- retryable failure, 2 permanent failure, 3 abandoned, 4 error after the
-- write; otherwise done.  A lost lease (ID003) undoes the write.
CREATE FUNCTION work_two(p_key text, p_token bigint, p_client int, p_roll int)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM pg_sleep(p_roll * 0.0005);
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
                                      WHEN 'tok' THEN 'consumed' END)
  UNION ALL
    SELECT 'record of work without its effect', count(*)
    FROM idem_records r
    WHERE r.scope IN ('one', 'many', 'two', 'tok')
      AND r.status IN ('claimed', 'completed', 'consumed')
      AND NOT EXISTS (SELECT 1 FROM effects e
                      WHERE e.scope = r.scope AND e.key = r.key)
  UNION ALL
    SELECT 'one-phase claim committed without idem_complete', count(*)
    FROM idem_records WHERE scope = 'one' AND status <> 'completed'
  UNION ALL
    SELECT 'effect of another worker than the one that finished', count(*)
    FROM idem_records r JOIN effects e USING (scope, key)
    WHERE r.scope = 'two'
      AND (r.token IS DISTINCT FROM e.token
           OR (r.result->>'token')::bigint IS DISTINCT FROM e.token)
  UNION ALL
    SELECT 'effect of unfinished work', count(*)
    FROM idem_records r JOIN effects e USING (scope, key)
    WHERE r.status IN ('in_progress', 'retryable', 'failed')
  UNION ALL
    SELECT 'token consumed twice, or its effect lost', count(*)
    FROM tokens t
    WHERE (SELECT count(*) FROM effects e WHERE e.scope = 'tok' AND e.key = t.token)
          <> (SELECT count(*) FROM idem_records r
              WHERE r.scope = 'tok' AND r.key = t.token AND r.status = 'consumed')
  UNION ALL
    SELECT 'issued token lost', count(*)
    FROM tokens t
    WHERE NOT EXISTS (SELECT 1 FROM idem_records r
                      WHERE r.scope = 'tok' AND r.key = t.token)
  UNION ALL
    SELECT 'undeclared transition made', count(*)
    FROM audit a WHERE NOT idem_can_transition('order', a.from_state, a.to_state)
  UNION ALL
    SELECT 'undeclared transition in the history', count(*)
    FROM idem_transition_log l
    WHERE l.to_state IS NULL
       OR NOT CASE WHEN l.from_state IS NULL
                   THEN l.to_state = 'new'
                   ELSE idem_can_transition('order', l.from_state, l.to_state) END
  UNION ALL
    SELECT 'history and audit disagree', count(*)
    FROM (SELECT id, from_state, to_state, count(*) FROM audit GROUP BY 1, 2, 3) a
    FULL JOIN (SELECT (row_key->>'id')::int AS id, from_state, to_state, count(*)
               FROM idem_transition_log WHERE from_state IS NOT NULL
               GROUP BY 1, 2, 3) l USING (id, from_state, to_state)
    WHERE a.count IS DISTINCT FROM l.count
  UNION ALL
    SELECT 'order version differs from its number of changes', count(*)
    FROM orders o
    WHERE o.version <> (SELECT count(*) FROM audit a WHERE a.id = o.id)
  UNION ALL
    SELECT 'payment made twice', count(*)
    FROM (SELECT 1 FROM payments GROUP BY id HAVING count(*) > 1) AS d
  UNION ALL
    SELECT 'payment and order status disagree', count(*)
    FROM orders o
    WHERE (o.status IN ('paid', 'shipped', 'delivered', 'refunded'))
          <> EXISTS (SELECT 1 FROM payments p WHERE p.id = o.id)
\$\$;
});

# Keys come in generations: every half second (two seconds for leased
# work) all clients move on to a fresh, small key space, so that racing
# claims of the same new key happen during the whole run rather than
# only at its start.
my $gen = q{SELECT (extract(epoch FROM clock_timestamp()) * 2)::bigint AS gen \gset};
my $gen2 = q{SELECT (extract(epoch FROM clock_timestamp()) / 2)::bigint AS gen \gset};

my %scripts = (
	one => [ 4, qq{
\\set k random(1, $nkeys)
$gen
BEGIN;
SELECT idem_claim('one', :gen || '-' || :k) AS owned \\gset
\\if :owned
INSERT INTO effects (scope, key, client) VALUES ('one', :gen || '-' || :k, :client_id);
SELECT idem_complete('one', :gen || '-' || :k, jsonb_build_object('client', :client_id));
\\endif
COMMIT;
} ],
	rr => [ 2, qq{
\\set k random(1, $nkeys)
$gen
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_claim('one', :gen || '-' || :k) AS owned \\gset
\\if :owned
INSERT INTO effects (scope, key, client) VALUES ('one', :gen || '-' || :k, :client_id);
SELECT idem_complete('one', :gen || '-' || :k, jsonb_build_object('client', :client_id));
\\endif
COMMIT;
} ],
	many => [ 3, qq{
\\set a random(1, $nkeys)
\\set b random(1, $nkeys)
\\set c random(1, $nkeys)
$gen
BEGIN;
INSERT INTO effects (scope, key, client)
SELECT 'many', m.key, :client_id
FROM idem_claim_many('many', ARRAY[:gen || '-' || :a, :gen || '-' || :b, :gen || '-' || :c,
                                   :gen || '-' || (:a % $nkeys + 1), :gen || '-' || :b]) AS m
WHERE m.claimed;
COMMIT;
} ],
	two => [ 4, qq{
\\set k random(1, $nkeys2)
\\set roll random(0, 12)
$gen2
SELECT coalesce((SELECT b.token FROM idem_begin('two', :gen || '-' || :k, lease => '1 second') AS b
                 WHERE b.outcome = 'acquired'), 0) AS tok \\gset
\\if :tok > 0
SELECT work_two(:gen || '-' || :k, :tok, :client_id, :roll);
\\endif
} ],
	# idem_claim on the leased keys: a live lease is a duplicate, a run-out
	# lease is taken over (and its worker's finish then fails with ID003).
	twoclaim => [ 1, qq{
\\set k random(1, $nkeys2)
$gen2
BEGIN;
SELECT idem_claim('two', :gen || '-' || :k) AS owned \\gset
\\if :owned
SELECT idem_release('two', :gen || '-' || :k);
\\endif
COMMIT;
} ],
	tok => [ 2, qq{
\\set t random(1, $ntokens)
BEGIN;
INSERT INTO effects (scope, key, client)
SELECT 'tok', t.token, :client_id FROM tokens t
WHERE t.id = :t AND idem_token_consume('tok', t.token);
COMMIT;
} ],
	order => [ 4, qq{
\\set id random(1, $norders)
\\set to random(0, 5)
\\set way random(0, 1)
SELECT order_event(:id, (ARRAY['new', 'paid', 'cancelled', 'shipped', 'delivered', 'refunded'])[:to + 1], :way, :client_id);
} ],
	neworder => [ 1, q{
\set s random(0, 2)
SELECT new_order((ARRAY['new', 'paid', 'bogus'])[:s + 1]);
} ],
	noise => [ 2, q{
\set k random(1, 50)
SELECT idem_claim('noise', 'k' || :k, '5 milliseconds');
} ],
	purge => [ 1, q{
SELECT idem_purge(20);
} ],);

my $dir = PostgreSQL::Test::Utils::tempdir;
my @files;
for my $name (sort keys %scripts)
{
	my $file = "$dir/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $scripts{$name}[1]);
	push @files, '-f', "$file\@$scripts{$name}[0]";
}

my ($stdout, $stderr) = ('', '');
my $ok = IPC::Run::run(
	[
		'pgbench', '-n', '-c', $clients, '-j', 2, '-T', $seconds,
		'--max-tries=100', '-h', $node->host, '-p', $node->port,
		@files, 'postgres'
	],
	'>', \$stdout, '2>', \$stderr);
note "pgbench:\n$stdout";
ok($ok, "pgbench soak: $clients clients for $seconds s ran to the end");
is($stderr, '', 'pgbench reported no error (no client aborted)');
like($stdout, qr/number of failed transactions: 0 /,
	'no transaction failed (serialization failures were retried)');
like($stdout, qr/number of transactions actually processed: [1-9]/,
	'transactions were processed');

my $bad = $node->safe_psql('postgres',
	q{SELECT string_agg(what || ': ' || n, ', ') FROM violations() WHERE n > 0});
is($bad, '', 'every invariant holds');

# The checker is not vacuous: planted damage is reported (and rolled back).
is( $node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO audit VALUES (1, 'delivered', 'new');
	INSERT INTO payments VALUES (-1, 0), (-1, 0);
	INSERT INTO effects SELECT scope, key, client, token FROM effects
	  WHERE scope = 'one' LIMIT 1;
	SELECT string_agg(what, ', ' ORDER BY what) FROM violations() WHERE n > 0;
	ROLLBACK;}),
	'effect applied twice, history and audit disagree, '
	  . 'order version differs from its number of changes, payment made twice, '
	  . 'undeclared transition made',
	'the invariant checker reports planted damage');

my ($one, $many, $two, $tok, $changes, $refused_states, $noise) =
  split /\|/, $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM effects WHERE scope = 'one'),
	       (SELECT count(*) FROM effects WHERE scope = 'many'),
	       (SELECT count(*) FROM effects WHERE scope = 'two'),
	       (SELECT count(*) FROM effects WHERE scope = 'tok'),
	       (SELECT count(*) FROM audit),
	       (SELECT count(*) FROM orders WHERE status NOT IN ('new')),
	       (SELECT count(*) FROM idem_records WHERE scope = 'noise')});
note "effects: one $one, many $many, two $two, tok $tok; order changes $changes";
cmp_ok($one,     '>', 0, 'one-phase claims did work');
cmp_ok($many,    '>', 0, 'batch claims did work');
cmp_ok($two,     '>', 0, 'leased work completed');
cmp_ok($tok,     '>', 0, 'tokens were consumed');
cmp_ok($changes, '>', 0, 'orders changed status');

# Effects per key equal exactly one per distinct key, also counted from the
# outside: a pass over every key claims exactly the keys without a record.
my ($free, $claimed_now, $keys) = split /\|/, $node->safe_psql('postgres', qq{
	CREATE TEMP TABLE all_keys AS
	SELECT g.gen || '-' || i AS key
	FROM (SELECT DISTINCT split_part(key, '-', 1) AS gen
	      FROM idem_records WHERE scope = 'one') AS g,
	     generate_series(1, $nkeys) AS i;
	SELECT (SELECT count(*) FROM all_keys a
	        WHERE NOT EXISTS (SELECT 1 FROM effects
	                          WHERE scope = 'one' AND key = a.key)),
	       (SELECT count(*) FILTER (WHERE idem_claim('one', a.key)) FROM all_keys a),
	       (SELECT count(*) FROM all_keys)});
cmp_ok($keys, '>=', 2 * $nkeys, "keys of several generations were claimed ($keys)");
is($claimed_now, $free, 'afterwards exactly the keys without an effect are free');

# Every consumed token stays consumed; every unconsumed one works once.
is( $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE idem_token_consume('tok', t.token))
	       = count(*) FILTER (WHERE NOT EXISTS
	             (SELECT 1 FROM effects e WHERE e.scope = 'tok' AND e.key = t.token))
	FROM tokens t}),
	't', 'afterwards exactly the unused tokens can be consumed');

# Every expired record is purged (the purge and the check are separate
# statements: a statement does not see what the functions it calls
# delete).
$node->safe_psql('postgres', 'SELECT pg_sleep(0.01)');
my $expired = $node->safe_psql('postgres', q{
	SELECT count(*) FROM idem_records WHERE expires_at <= clock_timestamp()});
is( $node->safe_psql('postgres', q{SELECT idem_purge(100000)}),
	$expired, "a final purge removes the expired records ($expired)");
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM idem_records WHERE expires_at <= clock_timestamp()}),
	'0', 'no expired record is left');

# The guard still refuses an undeclared transition after the run.
my ($ret, $out, $err) = $node->psql('postgres',
	q{UPDATE orders SET status = 'new' WHERE id = 1},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ID004/, 'the guard refuses moving an order back to new');

$node->stop;
done_testing();
