# A local Citus cluster for the TAP tests (020_citus.pl and later): one
# coordinator and N workers on local ports, each with
# shared_preload_libraries = 'citus,idempotency', joined with
# citus_add_node.  The helpers answer where a distribution value's shard is
# and on which node it lives, and read a shard's rows on that node.
#
#   use IdemCitus;
#   IdemCitus::skip_unless_citus();
#   my $c = IdemCitus->new(workers => 2);
#   $c->cq('SELECT ...');                  # psql on the coordinator
#   my $s = $c->shard_of('idem_records', 'k1');
#   $c->node_of($s)->safe_psql(...);
package IdemCitus;
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our $CONF = q(
shared_preload_libraries = 'citus,idempotency'
listen_addresses = '127.0.0.1'
max_prepared_transactions = 20
citus.shard_count = 4
citus.node_conninfo = 'sslmode=disable'
deadlock_timeout = '100ms'
);

# Skip the whole test file when citus.so is not installed.
sub skip_unless_citus
{
	my $pkglibdir = `pg_config --pkglibdir`;
	chomp $pkglibdir;
	plan skip_all => 'citus not installed' unless -f "$pkglibdir/citus.so";
}

# One node with citus and idempotency created in database postgres;
# $extra: more postgresql.conf lines for this node only.
sub new_node
{
	my ($self, $name, $extra) = @_;
	my $n = PostgreSQL::Test::Cluster->new($name);
	$n->init;
	$n->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
	$n->append_conf('postgresql.conf', $CONF . ($self->{conf} // '') . ($extra // ''));
	$n->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
	$n->start;
	$n->safe_psql('postgres',
		'CREATE EXTENSION citus; CREATE EXTENSION idempotency;');
	$self->{by_port}{ $n->port } = $n;
	return $n;
}

# A coordinator and $args{workers} workers (default 2), joined.
# $args{conf}: more postgresql.conf lines for every node; $args{coord_conf}:
# for the coordinator only.
sub new
{
	my ($class, %args) = @_;
	my $self = bless { by_port => {}, conf => $args{conf} }, $class;
	$self->{coord} = $self->new_node('coord', $args{coord_conf});
	$self->{coord}->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('127.0.0.1', " . $self->{coord}->port . ')');
	$self->{workers} = [];
	$self->add_worker for 1 .. ($args{workers} // 2);
	return $self;
}

# Start one more worker and add it to the cluster; returns its node.
sub add_worker
{
	my ($self) = @_;
	my $w = $self->new_node('worker' . (1 + @{ $self->{workers} }));
	$self->cq("SELECT citus_add_node('127.0.0.1', " . $w->port . ')');
	push @{ $self->{workers} }, $w;
	return $w;
}

sub coord   { return $_[0]{coord}; }
sub workers { return @{ $_[0]{workers} }; }
sub nodes   { return ($_[0]{coord}, @{ $_[0]{workers} }); }

# psql on the coordinator (database postgres).
sub cq { return $_[0]{coord}->safe_psql('postgres', $_[1]); }

# The shard of a distributed table holding a distribution value (a literal
# the distribution column's type accepts).
sub shard_of
{
	my ($self, $table, $value) = @_;
	return $self->cq(
		"SELECT get_shard_id_for_distribution_column('$table', '$value')");
}

# The node holding a shard's placement.
sub node_of
{
	my ($self, $shard) = @_;
	my $port = $self->cq(
		"SELECT nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE p.shardid = $shard");
	return $self->{by_port}{$port};
}

# Rows of a shard table matching $where, read on the node that holds it.
sub shard_rows
{
	my ($self, $table, $shard, $where) = @_;
	$where //= 'true';
	return $self->node_of($shard)->safe_psql('postgres',
		"SELECT count(*) FROM ${table}_$shard WHERE $where");
}

# Distribution values ("${prefix}0", "${prefix}1", ...) of $table on shards
# of two different workers, sorted.
sub values_on_two_workers
{
	my ($self, $table, $prefix) = @_;
	my %seen;
	for my $i (0 .. 200)
	{
		my $v = "$prefix$i";
		my $node = $self->node_of($self->shard_of($table, $v));
		$seen{ $node->port } //= $v;
		return sort values %seen if keys %seen == 2;
	}
	die "no values of $table on two workers";
}

1;
