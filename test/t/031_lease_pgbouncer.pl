# Bound leases behind PgBouncer in transaction pooling, as
# docs/reference.md ("Sessions and poolers") says: the bound session is
# the pooler's server connection, not the client.
#   - a client that disconnects frees nothing: its server connection stays
#     in the pool, so the lease's time rules;
#   - when the pooler closes the server connection (RECONNECT) while the
#     client still works, the lease is taken over early; the client's
#     token is then fenced off (ID003), so the harm is a second attempt,
#     never a second outcome;
#   - a client whose next transaction runs on another server connection
#     cannot mark the bound lease (idem_effect_started: 55000).
# PgBouncer listens on a Unix socket only.  Skipped without pgbouncer
# (Debian's package `pgbouncer`; test/scripts/run.sh installs it as root).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => 'pgbouncer is not installed' unless -x $pgbouncer;
# Debian's PgBouncer speaks protocol 3.0 only; libpq of PostgreSQL 19 asks
# for a newer one by default (older libpq ignores the variable).
$ENV{PGMAXPROTOCOLVERSION} = '3.0';

my $node = PostgreSQL::Test::Cluster->new('pooled');
$node->init;
$node->append_conf('postgresql.conf', "statement_timeout = '120s'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

# The pooler's endpoint, as a node that is never initialized: its port and
# socket directory are free ones the framework picked, and psql through it
# reaches PgBouncer.
my $bouncer = PostgreSQL::Test::Cluster->new('bouncer');
my $dir     = PostgreSQL::Test::Utils::tempdir;
my $user    = $ENV{USER} // getpwuid($<);
PostgreSQL::Test::Utils::append_to_file("$dir/users.txt", qq{"$user" ""\n});
my $node_host = $node->host;
my $node_port = $node->port;
my $b_host    = $bouncer->host;
my $b_port    = $bouncer->port;
PostgreSQL::Test::Utils::append_to_file(
	"$dir/pgbouncer.ini", qq{
[databases]
postgres = host=$node_host port=$node_port dbname=postgres
[pgbouncer]
listen_addr =
listen_port = $b_port
unix_socket_dir = $b_host
auth_type = trust
auth_file = $dir/users.txt
admin_users = $user
pool_mode = transaction
default_pool_size = 2
server_round_robin = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
});
my $proc = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
	'>', "$dir/stdout", '2>', "$dir/stderr");
ok($bouncer->poll_query_until('postgres', 'SELECT true'),
	'PgBouncer accepts connections');

# The pid of the server connection that runs a client's next transaction.
sub server_pid
{
	my ($client) = @_;
	return $client->query_safe('SELECT pg_backend_pid()');
}

# A client session that goes on after an error; try() returns its stderr.
sub client
{
	return $bouncer->background_psql('postgres', on_error_stop => 0);
}

sub try
{
	my ($s, $sql) = @_;
	$s->query($sql);
	return $s->{stderr};
}

# --- a client disconnect frees nothing --------------------------------------
{
	my $a = $bouncer->background_psql('postgres');
	my $out = $a->query_safe(
		"SELECT token FROM idem_begin('pool', 'gone-client', lease => '5 minutes', bind_to_session => true)");
	like($out, qr/^\d+$/, 'a client behind the pooler begins a bound lease');
	my $owner = $node->safe_psql('postgres',
		"SELECT owner_pid FROM idem_records WHERE key = 'gone-client'");
	$a->quit;
	is( $node->safe_psql(
			'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $owner"),
		'1',
		'after the client left, its server connection is still in the pool');
	is( $node->safe_psql(
			'postgres',
			"SELECT outcome FROM idem_begin('pool', 'gone-client', lease => '5 minutes')"),
		'in_progress',
		'a client disconnect behind the pooler does not free the key: the lease time rules');
}

# --- the pooler closes the server connection under a working client ---------
{
	my $b = client();
	my $token = $b->query_safe(
		"SELECT token FROM idem_begin('pool', 'reconnected', lease => '5 minutes', bind_to_session => true)");
	my $owner = $node->safe_psql('postgres',
		"SELECT owner_pid FROM idem_records WHERE key = 'reconnected'");
	$bouncer->safe_psql('pgbouncer', 'RECONNECT postgres');
	# RECONNECT closes each server connection once it is released.
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $owner")
	  or die 'the pooler kept the server connection';
	is( $node->safe_psql(
			'postgres',
			"SELECT outcome FROM idem_begin('pool', 'reconnected', lease => '5 minutes')"),
		'acquired',
		'the pooler closed the server connection: the lease is taken over, the client still working'
	);
	like(try($b, "SELECT idem_finish('pool', 'reconnected', $token)"),
		qr/lease lost/, "and the client's token is fenced off (ID003)");
	$b->quit;
}

# --- the next transaction on another server connection ----------------------
{
	my $c = client();
	my $d = $bouncer->background_psql('postgres');
	my $token = $c->query_safe(
		"SELECT token FROM idem_begin('pool', 'moved', lease => '5 minutes', bind_to_session => true)");
	# d holds the server connection c just released (LIFO), in a
	# transaction, so c's next transaction gets the other one.
	$d->query_safe('BEGIN');
	my $dpid = server_pid($d);
	my $owner = $node->safe_psql('postgres',
		"SELECT owner_pid FROM idem_records WHERE key = 'moved'");
	is($dpid, $owner, "the other client's transaction holds the lease's server connection");
	like(try($c, "SELECT idem_effect_started('pool', 'moved', $token)"),
		qr/the lease is bound to another session/,
		'a bound lease cannot be marked from another server connection (55000)');
	$d->query_safe('COMMIT');
	$c->quit;
	$d->quit;
}

$proc->kill_kill;
$node->stop;
done_testing();
