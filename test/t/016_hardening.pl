# Hardening that needs a server of its own:
#
# 1. idem_await stays bounded in time and memory.  Its poll interval used to
#    double without a cap and overflow after about 63 looks (6 s): the wait
#    then had no timeout, and once the latch was set (a NOTIFY on a channel
#    the session listens to) it polled nonstop, keeping every look's result
#    (2.5 GB in 8 s).  Here a 9-second await on a live lease is woken by a
#    burst of NOTIFYs after 7 s; the backend's resident memory must not grow
#    by more than 64 MB, and the await must end by its own timeout (the
#    statement_timeout of 30 s is only the bound that turns a hang into a
#    failure with a name).  A second waiter, never woken, must end by its
#    own 8-second timeout as well.
# 2. pgaudit's object audit sees every write of the extension: a claim
#    through the direct path, one through SPI, and a batch.  The direct
#    path used to check privileges itself, so ExecutorCheckPerms_hook was
#    never called and such claims were invisible to audit.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Resident memory of a process, in kB (Linux).
sub rss_kb
{
	my ($pid) = @_;
	my $status = slurp_file("/proc/$pid/status");
	return $status =~ /^VmRSS:\s+(\d+) kB/m ? $1 : die "no VmRSS for $pid";
}

my $node = PostgreSQL::Test::Cluster->new('hardening');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

# --- 1. idem_await -------------------------------------------------------
$node->safe_psql('postgres',
	"SELECT outcome FROM idem_begin('aw', 'k1', lease => '10 minutes')");
# A second waiter that nobody wakes: it must return at its own timeout.
my $sleeper = $node->background_psql('postgres');
$sleeper->query_until(qr/sleeping/, q(\echo sleeping
SET statement_timeout = '30s';
SELECT 'sleeper:' || status FROM idem_await('aw', 'k1', '8 seconds');
));
my $waiter = $node->background_psql('postgres');
my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
chomp $pid;
$waiter->query_until(qr/waiting/, q(\echo waiting
LISTEN wake;
SET statement_timeout = '30s';
SELECT 'await:' || status FROM idem_await('aw', 'k1', '9 seconds');
));

# Past the point where the old interval overflowed.
ok( $node->poll_query_until(
		'postgres', qq(
	SELECT clock_timestamp() - query_start > interval '7 seconds'
	  FROM pg_stat_activity WHERE pid = $pid AND query LIKE '%idem_await%')),
	'waiter has been in idem_await for 7 seconds');
my $before = rss_kb($pid);
$node->safe_psql('postgres',
	join("\n", map { "NOTIFY wake, '$_';" } 1 .. 300));
my $after = rss_kb($pid);
cmp_ok($after - $before, '<', 64 * 1024,
	"waiting backend's memory stays bounded when woken ($before kB -> $after kB)");

my $out = $waiter->query_safe("SELECT 'after'");
like($out, qr/await:in_progress/,
	'the await ended by its own timeout, with the lease still live');
$waiter->quit;
like($sleeper->query_safe("SELECT 'after'"), qr/sleeper:in_progress/,
	'an await nobody wakes ends by its own timeout too');
$sleeper->quit;

# --- 2. pgaudit ------------------------------------------------------------
my $libdir = $node->config_data('--pkglibdir');
my $major = $node->pg_version->major;
SKIP:
{
	skip "pgaudit not installed for PostgreSQL $major (Debian 12 packages it for 15 only)", 4
	  unless -e "$libdir/pgaudit.so";

	my $audit = PostgreSQL::Test::Cluster->new('audit');
	$audit->init;
	$audit->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'pgaudit'
pgaudit.role = 'auditor'
pgaudit.log_statement_once = on
});
	$audit->start;
	$audit->safe_psql(
		'postgres', q{
		CREATE EXTENSION pgaudit;
		CREATE EXTENSION idempotency;
		CREATE ROLE auditor;
		GRANT SELECT, INSERT, UPDATE ON idem_records TO auditor;
	});

	# The server log written while sql ran must hold an object audit line
	# for the INSERT into idem_records.
	my $audited = sub {
		my ($sql, $what) = @_;
		my $offset = -s $audit->logfile;
		$audit->safe_psql('postgres', $sql);
		like(
			slurp_file($audit->logfile, $offset),
			qr/AUDIT: OBJECT,\d+,\d+,WRITE,INSERT,TABLE,public\.idem_records,/,
			$what);
	};
	$audited->("SELECT idem_claim('audit', 'direct-path')",
		'a claim through the direct path is audited');
	$audited->("SET idempotency.direct_claim = off; SELECT idem_claim('audit', 'spi-path')",
		'a claim through SPI is audited');
	$audited->("SELECT count(*) FROM idem_claim_many('audit', ARRAY['batch-1', 'batch-2'])",
		'a batch claim is audited');
	$audited->("INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)"
		  . " VALUES ('audit', 'plain-insert', 'claimed', now(), now(), now() + interval '1 day')",
		'as a plain INSERT is');
	$audit->stop;
}

$node->stop;
done_testing();
