# ALTER EXTENSION idempotency UPDATE from every earlier release: records,
# leases and machine definitions written under the old version survive and
# keep working, and the upgraded extension is object for object the same as
# a fresh install of the current version (names, signatures, bodies,
# volatility, strictness, parallel labels, comments, dump registration).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->start;

my $current = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'idempotency'");
my @old = split /\n/, $node->safe_psql(
	'postgres', qq{
	SELECT version FROM pg_available_extension_versions
	 WHERE name = 'idempotency' AND version <> '$current'
	 ORDER BY string_to_array(version, '.')::int[]});
ok(@old >= 1, "earlier releases are installable next to $current: @old");

# A description of every member object of the extension, in a stable order.
my $describe = q{
	SELECT string_agg(d, E'\n' ORDER BY d) FROM (
	  SELECT pg_describe_object(dep.classid, dep.objid, 0)
	         || CASE WHEN p.oid IS NOT NULL THEN
	              ' | ' || pg_get_function_identity_arguments(p.oid)
	              || ' | ' || pg_get_function_result(p.oid)
	              || ' | ' || p.provolatile::text || p.proparallel::text || p.proisstrict::text
	              || p.prosecdef::text || ' | ' || p.prosrc
	              || ' | ' || coalesce(array_to_string(p.proconfig, ','), '')
	            ELSE '' END
	         || ' | ' || coalesce(obj_description(dep.objid, c.relname), '') AS d
	    FROM pg_depend dep
	    JOIN pg_class c ON c.oid = dep.classid
	    LEFT JOIN pg_proc p ON dep.classid = 'pg_proc'::regclass AND p.oid = dep.objid
	   WHERE dep.refclassid = 'pg_extension'::regclass
	     AND dep.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
	     AND dep.deptype = 'e'
	  UNION ALL
	  SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' '
	         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
	         || ' ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '')
	    FROM pg_attribute a
	    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	   WHERE a.attrelid IN (SELECT objid FROM pg_depend
	                         WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	                           AND classid = 'pg_class'::regclass
	                           AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency'))
	     AND a.attnum > 0 AND NOT a.attisdropped
	  UNION ALL
	  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	    FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
	   WHERE t.relnamespace = (SELECT extnamespace FROM pg_extension WHERE extname = 'idempotency')
	     AND t.relname LIKE 'idem%'
	  UNION ALL
	  SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid)
	    FROM pg_constraint
	   WHERE conrelid IN (SELECT oid FROM pg_class
	                       WHERE relnamespace = (SELECT extnamespace FROM pg_extension WHERE extname = 'idempotency')
	                         AND relname LIKE 'idem%')
	  UNION ALL
	  SELECT 'dump ' || unnest(extconfig)::regclass::text || ' ' || coalesce(array_to_string(extcondition, ','), '')
	    FROM pg_extension WHERE extname = 'idempotency'
	  UNION ALL
	  SELECT 'acl ' || c.relname || ' ' || coalesce(c.relacl::text, '')
	    FROM pg_class c
	   WHERE c.relnamespace = (SELECT extnamespace FROM pg_extension WHERE extname = 'idempotency')
	     AND c.relname LIKE 'idem%'
	) s};

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION idempotency');
my $fresh = $node->safe_psql('fresh', $describe);

foreach my $v (@old)
{
	my $db = "from_" . ($v =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION idempotency VERSION '$v'");
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
		$v, "$v installed");

	# Work done under the old version.
	$node->safe_psql(
		$db, q{
		SELECT idem_claim('pay', 'done', NULL, 'req-1');
		SELECT idem_complete('pay', 'done', '{"receipt": "r-1"}');
		SELECT idem_claim('pay', 'claimed-only');
		SELECT outcome FROM idem_begin('gw', 'leased', lease => '1 hour');
		SELECT idem_machine_define('order', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": []}}');
		CREATE TABLE guarded (id int PRIMARY KEY, status varchar(20), amount int,
		                      version int NOT NULL DEFAULT 0);
		SELECT idem_guard('guarded', 'status', 'order', 'version', true);
		INSERT INTO guarded VALUES (1, 'new', 0), (2, 'new', 0);
		-- A status derived by a BEFORE trigger (the UPDATE does not name it).
		CREATE FUNCTION derive() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.amount < 0 THEN NEW.status := 'bogus'; END IF;
		    IF NEW.amount > 0 THEN NEW.status := 'paid'; END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER a_derive BEFORE UPDATE ON guarded FOR EACH ROW EXECUTE FUNCTION derive();
	});
	my $records_sql = q{
		SELECT string_agg(concat_ws('|', scope, key, status, encode(fingerprint, 'hex'), result,
		                            created_at, expires_at, locked_until, token, attempts),
		                  E'\n' ORDER BY scope, key) FROM idem_records};
	my $before = $node->safe_psql($db, $records_sql);

	$node->safe_psql($db, 'ALTER EXTENSION idempotency UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
		$current, "$v updated to $current");

	is($node->safe_psql($db, $records_sql), $before, "$v: records intact after the update");
	is($node->safe_psql($db, $describe), $fresh,
		"$v: the updated extension has exactly the objects of a fresh $current install");

	# Behaviour intact.
	is($node->safe_psql($db, "SELECT idem_claim('pay', 'done', NULL, 'req-1')"),
		'f', "$v: an old key is still a duplicate");
	is($node->safe_psql($db, "SELECT (idem_lookup('pay', 'done')).result"),
		'{"receipt": "r-1"}', "$v: its result still replays");
	my ($ret, $out, $err) = $node->psql($db, "SELECT idem_claim('pay', 'done', NULL, 'req-2')");
	like($err, qr/reused with a different request/, "$v: its fingerprint is still checked");
	is($node->safe_psql($db, "SELECT outcome FROM idem_begin('gw', 'leased')"),
		'in_progress', "$v: the old lease still holds");
	is($node->safe_psql($db, "SELECT idem_claim('pay', 'new-key')"),
		't', "$v: new keys are claimed");
	is($node->safe_psql($db, "SELECT idem_can_transition('order', 'new', 'paid')"),
		't', "$v: machine definitions survive");
	is($node->safe_psql($db, "SELECT claimed FROM idem_summary WHERE scope = 'pay'"),
		'2', "$v: objects added by the update work");

	# Its guards were installed again: every trigger of the new shape
	# (no UPDATE OF), and a status derived by a BEFORE trigger is checked,
	# versioned and logged.
	is($node->safe_psql($db, q{
		SELECT count(*) FILTER (WHERE cardinality(tgattr::int2[]) > 0) || '/' || count(*)
		  FROM pg_trigger WHERE tgrelid = 'guarded'::regclass AND tgname LIKE 'idem_guard_%'}),
		'0/6', "$v: the guard is installed again in the new shape");
	($ret, $out, $err) = $node->psql($db, "UPDATE guarded SET amount = -1 WHERE id = 1");
	like($err, qr/illegal transition from "new" to "bogus"/,
		"$v: a status derived by a BEFORE trigger is checked after the update");
	$node->safe_psql($db, "UPDATE guarded SET amount = 5 WHERE id = 2");
	is($node->safe_psql($db, q{
		SELECT g.status || ' ' || g.version || ' ' || count(l.*)
		  FROM guarded g LEFT JOIN idem_transition_log l
		    ON l.row_key = jsonb_build_object('id', g.id) AND l.to_state = 'paid'
		 WHERE g.id = 2 GROUP BY g.status, g.version}),
		'paid 1 1', "$v: the derived move is versioned and logged");
}

$node->stop;
done_testing();
