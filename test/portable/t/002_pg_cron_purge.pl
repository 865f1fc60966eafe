# The background purge of the portable edition (docs/managed.md
# "Purging with pg_cron"): the C edition's purge worker needs a preloaded
# library, so the portable edition schedules idem_maintain() with pg_cron.
# A server with pg_cron preloaded (cron.database_name = app); the portable
# edition installed by the databases' owner, who is no superuser: in app
# through pg_tle when the installation has it (else the plain script), in
# a second database, other, as the plain script, both in schema idem;
# expired claims and live ones in each; the owner runs docs/managed.md's
# calls: cron.schedule in app, cron.schedule_in_database for other (pg_cron
# runs in one database only).  The expired records go while the live ones
# stay.  pg_cron 1.4 schedules by the minute, so the test waits until they
# are gone (at most 150 s, no timing asserted).
#
# Run by test/scripts/portable.sh (step "tap") with:
#   IDEM_PORTABLE_INSTALL  the installation (pg_cron in it, no C edition)
#   IDEM_CRON=1            pg_cron is installed there
#   IDEM_PLAIN_FILE        build/portable/idempotency-portable--VERSION.sql
#   IDEM_TLE_FILE          build/tle/idempotency--pgtle.sql, when pg_tle is
#                          installed there too
# and skipped without them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my ($install, $tle_file, $plain_file) = @ENV{qw(IDEM_PORTABLE_INSTALL IDEM_TLE_FILE IDEM_PLAIN_FILE)};
plan skip_all => 'needs pg_cron (postgresql-NN-cron; test/scripts/portable.sh installs it as root on Debian\'s PostgreSQL)'
  unless $ENV{IDEM_CRON} && $install && $plain_file;

# The job (the purge as its schedule runs it) and the schedules, as
# docs/managed.md writes them.
my $command = 'SELECT idem.idem_maintain()';
my $schedule = q{SELECT cron.schedule('idempotency-maintain', '* * * * *', 'SELECT idem.idem_maintain()')};
my $schedule_other = q{SELECT cron.schedule_in_database('idempotency-maintain-other', '* * * * *', 'SELECT idem.idem_maintain()', 'other')};

my $node = PostgreSQL::Test::Cluster->new('cron', install_path => $install);
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
my $preload = $tle_file ? 'pg_tle,pg_cron' : 'pg_cron';
my $host = $node->host;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = '$preload'
cron.database_name = 'app'
cron.host = '$host'
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE admin LOGIN NOSUPERUSER;
	CREATE DATABASE app OWNER admin;
	CREATE DATABASE other OWNER admin;
});
# What the provider's administrator does: pg_cron, and its use granted
# (schedule_in_database is revoked from PUBLIC by pg_cron itself).
$node->safe_psql('app', q{
	CREATE EXTENSION pg_cron;
	GRANT USAGE ON SCHEMA cron TO admin;
	GRANT EXECUTE ON FUNCTION cron.schedule_in_database(text, text, text, text, text, boolean) TO admin;
});
my @as_admin = (extra_params => [ '-U', 'admin' ]);
if ($tle_file) {
	$node->safe_psql('app', 'CREATE EXTENSION pg_tle; GRANT pgtle_admin TO admin;');
	$node->safe_psql('app', slurp_file($tle_file), @as_admin);
	$node->safe_psql('app', 'CREATE SCHEMA idem; CREATE EXTENSION idempotency SCHEMA idem;', @as_admin);
}
# As from a migration tool: the setting, then the file, in one session.
my $plain = "SET idempotency.install_schema = 'idem';\n" . slurp_file($plain_file);
$node->safe_psql('app', $plain, @as_admin) unless $tle_file;
$node->safe_psql('other', $plain, @as_admin);
my %edition = (app => $tle_file ? 'pg_tle' : 'plain script', other => 'plain script');
for my $db (qw(app other)) {
	is($node->safe_psql($db, q{
		SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		 WHERE p.oid = 'idem.idem_claim(text,text,interval,text)'::regprocedure}),
		'plpgsql', "$db: the portable edition ($edition{$db})");
	# 40 claims that expire at once, 10 that live for the default 7 days.
	$node->safe_psql($db, q{
		SELECT pg_catalog.count(*) FROM generate_series(1, 40) g
		 WHERE idem.idem_claim('cron', 'old-' || g, ttl => '1 millisecond');
		SELECT pg_catalog.count(*) FROM generate_series(1, 10) g
		 WHERE idem.idem_claim('cron', 'live-' || g);
	}, @as_admin);
}
my $count = q{SELECT pg_catalog.count(*) FILTER (WHERE key LIKE 'old-%') || ' ' || pg_catalog.count(*) FILTER (WHERE key LIKE 'live-%')
                FROM idem.idem_records WHERE scope = 'cron'};
is($node->safe_psql($_, $count), '40 10', "$_: the expired claims are there before the schedule") for qw(app other);

my %jobid;
$jobid{app} = $node->safe_psql('app', $schedule, @as_admin);
like($jobid{app}, qr/^\d+$/, 'cron.schedule as the extension\'s owner (no superuser)');
$jobid{other} = $node->safe_psql('app', $schedule_other, @as_admin);
like($jobid{other}, qr/^\d+$/, 'cron.schedule_in_database for another database, as its owner');
is($node->safe_psql('app', "SELECT string_agg(username || ' ' || database || ' ' || command, ', ' ORDER BY jobid) FROM cron.job"),
	"admin app $command, admin other $command", 'the jobs run idem_maintain() as the owner in each database');

# Wait for the purges: a job every minute; 150 s at most.
my %left;
my $deadline = time + 150;
while (time < $deadline) {
	$left{$_} = $node->safe_psql($_, $count) for qw(app other);
	last if $left{app} eq '0 10' && $left{other} eq '0 10';
	usleep(2_000_000);
}
for my $db (qw(app other)) {
	is($left{$db}, '0 10', "$db: pg_cron ran idem_maintain(): the expired records are gone, the live ones stay");
	is($node->safe_psql('app', qq{
		SELECT pg_catalog.count(*) > 0 FROM cron.job_run_details
		 WHERE jobid = $jobid{$db} AND status = 'succeeded' AND command = '$command'}),
		't', "$db: cron.job_run_details records the purge as succeeded");
	is($node->safe_psql($db, q{
		SELECT idem.idem_claim('cron', 'live-1'), idem.idem_claim('cron', 'old-1')}, @as_admin),
		'f|t', "$db: a live key is still a duplicate; a purged one is new again");
}
is($node->safe_psql('app', q{SELECT cron.unschedule('idempotency-maintain') AND cron.unschedule('idempotency-maintain-other')}, @as_admin),
	't', 'cron.unschedule by name');

$node->stop;
done_testing();
