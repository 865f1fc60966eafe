# Model-based random testing.  A seeded generator produces a few thousand
# random API calls (claims, batch claims, leases, tokens, lookups,
# releases, purges, state machines, a guarded table) interleaved with
# transactions, savepoints, rollbacks, errors inside transactions, and
# simulated passing of time (a record's expiry or lease moved into the
# past).  Each call runs in one long-lived session against the extension
# and against a reference model written here; every return value and
# every SQLSTATE must agree.  Every 250 operations (outside transactions)
# the whole records table, the guarded table and its history are compared
# with the model as well.
#
# Reproduce a run with IDEM_MODEL_SEED=<seed> (printed at the start);
# IDEM_MODEL_OPS=<n> sets the number of operations (default 3000, or
# 30000 with SOAK=1).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::SHA qw(sha256_hex);
use Storable qw(dclone);

my $seed = $ENV{IDEM_MODEL_SEED} // 20261129;
my $nops = $ENV{IDEM_MODEL_OPS} // ($ENV{SOAK} ? 30000 : 3000);
diag("model: IDEM_MODEL_SEED=$seed IDEM_MODEL_OPS=$nops");

#--------------------------------------------------------------------------
# A small deterministic PRNG (xorshift32), so that a seed reproduces the
# same run on any perl.
#--------------------------------------------------------------------------
my $rng = (($seed % 4294967295) ^ 0x9E3779B9) || 2463534242;

sub rnd
{
	my ($n) = @_;
	$rng ^= ($rng << 13) & 0xFFFFFFFF;
	$rng ^= $rng >> 17;
	$rng ^= ($rng << 5) & 0xFFFFFFFF;
	return $rng % $n;
}
sub pick   { return $_[ rnd(scalar @_) ]; }
sub chance { return rnd(100) < $_[0]; }

#--------------------------------------------------------------------------
# The server and one session.
#--------------------------------------------------------------------------
my $node = PostgreSQL::Test::Cluster->new('model');
$node->init;
$node->append_conf("postgresql.conf", "idempotency.autocommit_claims = allow\n");    # claims stand alone here
$node->append_conf('postgresql.conf', "log_statement = none\n");
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION idempotency;
-- A record as one line: status|result|attempts|fingerprint|token|leased.
CREATE FUNCTION fmt(r idem_record) RETURNS text LANGUAGE sql AS $$
    SELECT CASE WHEN r.status IS NULL THEN 'none' ELSE concat_ws('|',
        r.status, coalesce(r.result::text, '~'), r.attempts,
        coalesce(encode(r.fingerprint, 'hex'), '~'),
        coalesce(r.token::text, '~'), r.locked_until IS NOT NULL) END
$$;
SELECT idem_machine_define('gm', '{"initial": ["a"], "transitions": {"a": ["b"], "b": ["c", "a"]}}');
CREATE TABLE g_rows (id int PRIMARY KEY, st text, v int NOT NULL DEFAULT 0);
SELECT idem_guard('g_rows', 'st', 'gm', 'v', true);
});

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY sqlstate');

sub run_sql
{
	my ($sql) = @_;
	$s->{stderr} = '';
	my ($out) = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ('ERR', $1) if $err =~ /ERROR:\s+([0-9A-Z]{5})/;
	# idem_transition warns at a repeated transition (01000), by design.
	$err =~ s/psql:<stdin>:\d+: WARNING:  01000\s*//g if $sql =~ /idem_transition\(/;
	die "unexpected output on stderr for $sql: $err" if $err ne '';
	return ('OK', $out);
}

#--------------------------------------------------------------------------
# The model.
#--------------------------------------------------------------------------
my $state = {
	recs     => {},    # "scope\0key" => record
	machines => {
		gm => { initial => ['a'], trans => { a => ['b'], b => [ 'c', 'a' ] } }
	},
	rows         => {},    # guarded table: id => { st, v }
	log_count    => 0,     # rows of idem_transition_log
	max_attempts => 0,     # idempotency.max_attempts
};
my $in_xact = 0;
my $xact_rr = 0;            # REPEATABLE READ
my $aborted = 0;
my $xact_snapshot;
my @savepoints;             # [name, snapshot]
my $sp_counter = 0;

# Outside the transactional state: sequences and the wall clock.
my $max_token = 0;          # greatest fencing token seen
my %token_history;          # "scope\0key" => [tokens]
my @all_tokens;             # fencing tokens, for stale-token picks
my %issued;                 # one-time token text => scope
my $expseq = 0;             # order of simulated expiries

sub rk { return "$_[0]\0$_[1]"; }

my @scopes = ('', 's1', 'S1');
my @keys   = ('a', 'A', 'a ', "\xc3\xa9", "k'1", 'k2');
my @fps    = (undef, undef, 'fp-a', 'fp-b');
my @results = (undef, '{"n": 1}', '[1, "x"]', '"s"', '0', 'null',
	'{"a": {"b": [true, false]}}');

sub lit
{
	my ($v) = @_;
	return 'NULL' unless defined $v;
	$v =~ s/'/''/g;
	return "'$v'";
}

sub fp_digest { return defined $_[0] ? sha256_hex($_[0]) : undef; }

# Argument validation shared by the functions (in their order).
sub check_scope
{
	my ($scope) = @_;
	return '22004' unless defined $scope;
	return '22001' if length($scope) > 128;
	return undef;
}

sub check_key
{
	my ($key) = @_;
	return '22004' unless defined $key;
	return '22023' if $key eq '';
	return '22001' if length($key) > 1024;
	return undef;
}

# interval literal => undef (valid, positive), '22023' (not positive or
# out of range); NULL is handled by the caller.
my %interval_ok = (
	"'1 day'" => 1, "'1 hour'" => 1, "'2 hours'" => 1, "'1 day -1 hour'" => 1,
	"'0'" => 0, "'-1 hour'" => 0, "'1 month -40 days'" => 0,
	"'1000000 years'" => 0, "'-1 second'" => 0);

sub gen_scope
{
	return undef if chance(1);
	return 'x' x 129 if chance(1);
	return pick(@scopes);
}

sub gen_key
{
	my ($scope) = @_;
	return undef if chance(1);
	return '' if chance(1);
	return 'k' x 1025 if chance(1);
	if (chance(5) && %issued)
	{
		my @t = sort keys %issued;
		return pick(@t);
	}
	return pick(@keys);
}

sub gen_interval
{
	my (@good) = @_;
	return pick("'0'", "'-1 hour'", "'1 month -40 days'", "'1000000 years'")
	  if chance(3);
	return pick(@good);
}

sub rec_live { my ($r) = @_; return $r && $r->{live}; }

sub new_record
{
	my (%f) = @_;
	return {
		status     => $f{status},
		fp         => $f{fp},
		result     => undef,
		token      => undef,
		attempts   => $f{attempts} // 0,
		live       => 1,
		lease_live => 0,
		expseq     => 0,
	};
}

sub fmt_rec
{
	my ($r) = @_;
	return 'none' unless rec_live($r);
	return join('|',
		$r->{status}, $r->{result} // '~', $r->{attempts}, $r->{fp} // '~',
		$r->{token} // '~', ($r->{status} eq 'in_progress' ? 't' : 'f'));
}

#--------------------------------------------------------------------------
# Operations.  Each returns (sql, expectation, apply): expectation is
# ['ERR', sqlstate] or ['OK', output] (output may be a code ref that
# checks the actual output); apply, if any, runs when the call succeeded
# as predicted.
#--------------------------------------------------------------------------

# The claim rule of idem_claim and idem_claim_many, on one key.
sub claim_one
{
	my ($k, $fp) = @_;
	my $r = $state->{recs}{$k};
	if (!$r)
	{
		$state->{recs}{$k} = new_record(status => 'claimed', fp => $fp);
		return 't';
	}
	if ($r->{live}
		&& $r->{status} ne 'retryable'
		&& !($r->{status} eq 'in_progress' && !$r->{lease_live}))
	{
		return 'f';
	}
	my $attempts = $r->{live} ? $r->{attempts} : 0;
	$state->{recs}{$k} = new_record(status => 'claimed', fp => $fp,
		attempts => $attempts);
	return 't';
}

sub op_claim
{
	if (chance(15))
	{
		my $key = gen_key('');
		my $sql = 'SELECT idem_claim(' . lit($key) . ')';
		my $e = check_key($key);
		return ($sql, [ 'ERR', $e ]) if $e;
		return ($sql, [ 'OK', undef ], sub { return claim_one(rk('', $key), undef); });
	}
	my $scope = gen_scope();
	my $key   = gen_key($scope);
	my $ttl   = chance(50) ? 'NULL' : gen_interval("'1 day'", "'1 day -1 hour'");
	my $fp    = pick(@fps);
	my $sql   = sprintf('SELECT idem_claim(%s, %s, %s::interval, %s)',
		lit($scope), lit($key), $ttl, lit($fp));
	my $e = check_scope($scope) // check_key($key);
	$e //= '22023' if $ttl ne 'NULL' && !$interval_ok{$ttl};
	return ($sql, [ 'ERR', $e ]) if $e;
	my $k = rk($scope, $key);
	my $r = $state->{recs}{$k};
	my $d = fp_digest($fp);
	return ($sql, [ 'ERR', 'ID001' ])
	  if rec_live($r) && defined $d && defined $r->{fp} && $d ne $r->{fp};
	return ($sql, [ 'OK', undef ], sub { return claim_one($k, $d); });
}

sub op_complete
{
	my $scope  = gen_scope();
	my $key    = gen_key($scope);
	my $result = pick(@results);
	my $sql    = sprintf('SELECT idem_complete(%s, %s, %s::jsonb)',
		lit($scope), lit($key), lit($result));
	my $e = check_scope($scope) // check_key($key);
	return ($sql, [ 'ERR', $e ]) if $e;
	# A NULL result is refused: it would replay nothing.
	return ($sql, [ 'ERR', '22004' ]) unless defined $result;
	my $r = $state->{recs}{ rk($scope, $key) };
	return ($sql, [ 'ERR', 'ID002' ]) unless rec_live($r);
	return ($sql, [ 'ERR', 'ID005' ]) if $r->{status} ne 'claimed';
	return ($sql, [ 'OK', '' ],
		sub { $r->{status} = 'completed'; $r->{result} = $result; return ''; });
}

sub op_lookup
{
	my $scope = gen_scope();
	my $key   = gen_key($scope);
	my $await = chance(25);
	my $timeout = "'0'";
	$timeout = pick('NULL', "'-1 second'") if $await && chance(10);
	my $sql = $await
	  ? sprintf('SELECT fmt(idem_await(%s, %s, %s::interval))',
		lit($scope), lit($key), $timeout)
	  : sprintf('SELECT fmt(idem_lookup(%s, %s))', lit($scope), lit($key));
	my $e = check_scope($scope) // check_key($key);
	$e //= '22004' if $await && $timeout eq 'NULL';
	$e //= '25000' if $await && $in_xact && $xact_rr;
	$e //= '22023' if $await && $timeout eq "'-1 second'";
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'OK', fmt_rec($state->{recs}{ rk($scope, $key) }) ]);
}

sub op_release
{
	my $scope = gen_scope();
	my $key   = gen_key($scope);
	my $sql   = sprintf('SELECT idem_release(%s, %s)', lit($scope), lit($key));
	my $e     = check_scope($scope) // check_key($key);
	return ($sql, [ 'ERR', $e ]) if $e;
	my $k = rk($scope, $key);
	my $r = $state->{recs}{$k};
	return ($sql, [ 'OK', 'f' ]) unless $r;
	return ($sql, [ 'ERR', 'ID005' ])
	  if $r->{status} eq 'in_progress' && $r->{lease_live} && $r->{live};
	return ($sql, [ 'OK', $r->{live} ? 't' : 'f' ],
		sub { delete $state->{recs}{$k}; return; });
}

sub op_purge
{
	my $n = pick(1, 2, 3, 1000, 0, -1, undef);
	my $sql = 'SELECT idem_purge(' . ($n // 'NULL') . ')';
	return ($sql, [ 'ERR', '22004' ]) unless defined $n;
	return ($sql, [ 'ERR', '22023' ]) if $n < 1;
	my @dead = sort { $state->{recs}{$a}{expseq} <=> $state->{recs}{$b}{expseq} }
	  grep { !$state->{recs}{$_}{live} } keys %{ $state->{recs} };
	splice(@dead, $n) if @dead > $n;
	return ($sql, [ 'OK', scalar(@dead) ],
		sub { delete $state->{recs}{$_} for @dead; return; });
}

sub op_begin
{
	my $scope = gen_scope();
	my $key   = gen_key($scope);
	my $lease = chance(2) ? 'NULL' : gen_interval("'1 hour'", "'2 hours'");
	my $ttl   = chance(70) ? 'NULL' : gen_interval("'1 day'");
	my $fp    = pick(@fps);
	my $sql   = sprintf(
		q{SELECT b.outcome || '|' || coalesce(b.token::text, '~') || '|' || coalesce(b.result::text, '~')
		  FROM idem_begin(%s, %s, lease => %s::interval, ttl => %s::interval, fingerprint => %s) b},
		lit($scope), lit($key), $lease, $ttl, lit($fp));
	my $e = check_scope($scope) // check_key($key);
	$e //= '22004' if $lease eq 'NULL';
	$e //= '22023' if !$interval_ok{$lease};
	$e //= '22023' if $ttl ne 'NULL' && !$interval_ok{$ttl};
	return ($sql, [ 'ERR', $e ]) if $e;
	my $k = rk($scope, $key);
	my $r = $state->{recs}{$k};
	my $d = fp_digest($fp);
	my $acquire = sub {
		my ($attempts, $fpv) = @_;
		return (
			$sql,
			[ 'OK', qr/^acquired\|(\d+)\|~$/ ],
			sub {
				my ($token) = @_;
				my $nr = new_record(status => 'in_progress', fp => $fpv,
					attempts => $attempts);
				$nr->{token}      = $token;
				$nr->{lease_live} = 1;
				$state->{recs}{$k} = $nr;
				push @{ $token_history{$k} }, $token;
				push @all_tokens, $token;
				return;
			});
	};
	return $acquire->(1, $d) unless $r;
	if ($r->{live})
	{
		return ($sql, [ 'ERR', 'ID001' ])
		  if defined $d && defined $r->{fp} && $d ne $r->{fp};
		return ($sql, [ 'OK', 'failed|~|' . ($r->{result} // '~') ])
		  if $r->{status} eq 'failed';
		return ($sql, [ 'OK', 'in_progress|~|~' ])
		  if $r->{status} eq 'in_progress' && $r->{lease_live};
		return ($sql, [ 'OK', 'completed|~|' . ($r->{result} // '~') ])
		  if $r->{status} ne 'retryable' && $r->{status} ne 'in_progress';
		return $acquire->($r->{attempts} + 1, $r->{fp} // $d);
	}
	return $acquire->(1, $d);
}

# A token for the lease functions: usually the current one.
sub gen_token
{
	my ($k) = @_;
	my $r = $state->{recs}{$k};
	return undef if chance(2);
	return $r->{token} if $r && defined $r->{token} && chance(60);
	my $hist = $token_history{$k};
	return pick(@$hist) if $hist && @$hist && chance(50);
	return pick(@all_tokens) if @all_tokens && chance(50);
	return pick(1, 999999999999);
}

sub holds
{
	my ($k, $token) = @_;
	my $r = $state->{recs}{$k};
	return $r && $r->{status} eq 'in_progress' && $r->{live}
	  && defined $r->{token} && $r->{token} == $token;
}

sub pick_lease_key
{
	# Mostly keys that have a lease, so that the calls do something.
	my @leased = grep { $state->{recs}{$_}{status} eq 'in_progress' }
	  sort keys %{ $state->{recs} };
	if (@leased && chance(70))
	{
		my ($scope, $key) = split /\0/, pick(@leased), 2;
		return ($scope, $key);
	}
	my $scope = gen_scope();
	return ($scope, gen_key($scope));
}

sub op_heartbeat
{
	my ($scope, $key) = pick_lease_key();
	my $k     = defined $scope && defined $key ? rk($scope, $key) : '';
	my $token = gen_token($k);
	my $lease = chance(50) ? 'NULL' : gen_interval("'2 hours'");
	my $sql   = sprintf('SELECT idem_heartbeat(%s, %s, %s, %s::interval) > now()',
		lit($scope), lit($key), $token // 'NULL', $lease);
	my $e = check_scope($scope) // check_key($key);
	$e //= '22004' unless defined $token;
	$e //= '22023' if $lease ne 'NULL' && !$interval_ok{$lease};
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'ERR', exists $state->{recs}{$k} ? 'ID003' : 'ID002' ])
	  unless holds($k, $token);
	return ($sql, [ 'OK', 't' ],
		sub { $state->{recs}{$k}{lease_live} = 1; return; });
}

sub op_finish
{
	my ($scope, $key) = pick_lease_key();
	my $k      = defined $scope && defined $key ? rk($scope, $key) : '';
	my $token  = gen_token($k);
	my $result = pick(@results);
	my $sql    = sprintf('SELECT idem_finish(%s, %s, %s, %s::jsonb)',
		lit($scope), lit($key), $token // 'NULL', lit($result));
	my $e = check_scope($scope) // check_key($key);
	$e //= '22004' unless defined $token;
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'ERR', exists $state->{recs}{$k} ? 'ID003' : 'ID002' ])
	  unless holds($k, $token);
	return (
		$sql,
		[ 'OK', '' ],
		sub {
			my $r = $state->{recs}{$k};
			$r->{status}     = 'completed';
			$r->{result}     = $result;
			$r->{lease_live} = 0;
			return;
		});
}

sub op_fail
{
	my ($scope, $key) = pick_lease_key();
	my $k         = defined $scope && defined $key ? rk($scope, $key) : '';
	my $token     = gen_token($k);
	my $error     = pick(@results);
	my $retryable = pick('true', 'true', 'false', 'NULL');
	my $sql       = sprintf('SELECT idem_fail(%s, %s, %s, %s::jsonb, %s)',
		lit($scope), lit($key), $token // 'NULL', lit($error), $retryable);
	my $e = check_scope($scope) // check_key($key);
	$e //= '22004' unless defined $token;
	$e //= '22004' if $retryable eq 'NULL';
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'ERR', exists $state->{recs}{$k} ? 'ID003' : 'ID002' ])
	  unless holds($k, $token);
	return (
		$sql,
		[ 'OK', '' ],
		sub {
			my $r   = $state->{recs}{$k};
			my $max = $state->{max_attempts};
			$r->{status} =
			  ($retryable eq 'true' && ($max == 0 || $r->{attempts} < $max))
			  ? 'retryable'
			  : 'failed';
			$r->{result}     = $error;
			$r->{lease_live} = 0;
			return;
		});
}

sub op_claim_many
{
	my $scope = gen_scope();
	my $ttl   = chance(70) ? 'NULL' : gen_interval("'1 day'");
	my $n     = rnd(6);
	my @elems = map { pick(@keys) } 1 .. $n;
	my $shape = rnd(100);
	my $array;
	my $e = check_scope($scope);
	if ($shape < 2)
	{
		$array = 'NULL::text[]';
		$e //= '22004';
	}
	elsif ($shape < 4)
	{
		$array = q{ARRAY[['a', 'b'], ['c', 'd']]};
		$e //= '22023';
	}
	else
	{
		my $bad = rnd(100);
		if ($bad < 3 && $n > 0)
		{
			$elems[ rnd($n) ] = pick(undef, '', 'k' x 1025);
		}
		$array = 'ARRAY[' . join(', ', map { lit($_) } @elems) . ']::text[]';
		for my $el (@elems)
		{
			$e //= check_key($el);
		}
	}
	$e //= '22023' if $ttl ne 'NULL' && !$interval_ok{$ttl};
	my $sql = sprintf(
		q{SELECT coalesce(string_agg(m.key || '=' || m.claimed, ',' ORDER BY m.n), '(none)')
		  FROM idem_claim_many(%s, %s, %s::interval) WITH ORDINALITY AS m(key, claimed, n)},
		lit($scope), $array, $ttl);
	return ($sql, [ 'ERR', $e ]) if $e;
	return (
		$sql,
		[ 'OK', undef ],
		sub {
			my %done;
			my @out;
			for my $el (@elems)
			{
				if (exists $done{$el})
				{
					push @out, "$el=false";
					next;
				}
				my $c = claim_one(rk($scope, $el), undef);
				$done{$el} = 1;
				push @out, "$el=" . ($c eq 't' ? 'true' : 'false');
			}
			return @out ? join(',', @out) : '(none)';
		});
}

sub op_token_issue
{
	my $scope = gen_scope();
	my $ttl   = chance(60) ? 'DEFAULT' : gen_interval("'1 hour'", "'1 day'");
	$ttl = 'NULL' if chance(2);
	my $sql = $ttl eq 'DEFAULT'
	  ? sprintf('SELECT idem_token_issue(%s)', lit($scope))
	  : sprintf('SELECT idem_token_issue(%s, %s::interval)', lit($scope), $ttl);
	my $e = check_scope($scope);
	$e //= '22004' if $ttl eq 'NULL';
	$e //= '22023' if $ttl ne 'DEFAULT' && $ttl ne 'NULL' && !$interval_ok{$ttl};
	return ($sql, [ 'ERR', $e ]) if $e;
	return (
		$sql,
		[ 'OK', qr/^([0-9a-f]{32})$/ ],
		sub {
			my ($token) = @_;
			die "token $token issued twice" if exists $issued{$token};
			$issued{$token} = $scope;
			$state->{recs}{ rk($scope, $token) } = new_record(status => 'issued');
			return;
		});
}

sub op_token_consume
{
	my $scope = gen_scope();
	my $token;
	my $shape = rnd(100);
	my @t = sort keys %issued;
	if (@t && $shape < 60)
	{
		$token = pick(@t);
		$scope = $issued{$token} if chance(80) && defined $scope && length($scope) <= 128;
	}
	elsif ($shape < 75) { $token = '0123456789abcdef0123456789abcdef'; }
	elsif ($shape < 80) { $token = undef; }
	else
	{
		$token = pick('0123456789ABCDEF0123456789abcdef', 'abc',
			'0123456789abcdef0123456789abcdef0', 'g' x 32, "\xc3\xa9" x 16);
	}
	my $sql = sprintf('SELECT idem_token_consume(%s, %s)', lit($scope), lit($token));
	my $e = check_scope($scope);
	$e //= '22004' unless defined $token;
	$e //= '22023' unless $token =~ /^[0-9a-f]{32}\z/;
	return ($sql, [ 'ERR', $e ]) if $e;
	my $r = $state->{recs}{ rk($scope, $token) };
	return ($sql, [ 'OK', 'f' ]) unless rec_live($r) && $r->{status} eq 'issued';
	return ($sql, [ 'OK', 't' ], sub { $r->{status} = 'consumed'; return; });
}

# Time passes: a record expires, or a lease runs out.
sub op_age
{
	my @k = sort keys %{ $state->{recs} };
	return op_lookup() unless @k;
	my $k = pick(@k);
	my ($scope, $key) = split /\0/, $k, 2;
	my $r = $state->{recs}{$k};
	if ($r->{status} eq 'in_progress' && $r->{lease_live} && chance(60))
	{
		return (
			sprintf(q{UPDATE idem_records SET locked_until = clock_timestamp() - interval '1 second'
			          WHERE scope = %s AND key = %s}, lit($scope), lit($key)),
			[ 'OK', '' ],
			sub { $r->{lease_live} = 0; return; });
	}
	my $seq = ++$expseq;
	return (
		sprintf(q{UPDATE idem_records SET expires_at = '2001-01-01'::timestamptz + %d * interval '1 second'
		          WHERE scope = %s AND key = %s}, $seq, lit($scope), lit($key)),
		[ 'OK', '' ],
		sub { $r->{live} = 0; $r->{expseq} = $seq; return; });
}

sub op_guc
{
	my $n = pick(0, 0, 1, 2, 3);
	return ("SET idempotency.max_attempts = $n", [ 'OK', '' ],
		sub { $state->{max_attempts} = $n; return; });
}

#--------------------------------------------------------------------------
# State machines and the guarded table.
#--------------------------------------------------------------------------
my @machine_names = ('gm', 'm1', 'm2', "m'q");
my @state_names   = ('a', 'b', 'c', 'd', 'e');

sub states_of
{
	my ($m) = @_;
	my %s = map { $_ => 1 } @{ $m->{initial} };
	for my $from (keys %{ $m->{trans} })
	{
		$s{$from} = 1;
		$s{$_} = 1 for @{ $m->{trans}{$from} };
	}
	return \%s;
}

sub allows
{
	my ($m, $f, $t) = @_;
	return scalar grep { $_ eq $t } @{ $m->{trans}{$f} // [] };
}

sub json_str_list { return '[' . join(', ', map { qq{"$_"} } @_) . ']'; }

sub machine_json
{
	my ($m) = @_;
	return sprintf('{"initial": %s, "transitions": {%s}}',
		json_str_list(@{ $m->{initial} }),
		join(', ',
			map { qq{"$_": } . json_str_list(@{ $m->{trans}{$_} }) }
			  sort keys %{ $m->{trans} }));
}

sub random_machine
{
	my @initial = grep { chance(35) } @state_names;
	@initial = (pick(@state_names)) unless @initial;
	my %edges;
	for my $from (@state_names)
	{
		my @t = grep { chance(30) } @state_names;
		$edges{$from} = \@t;
	}
	# Keep the part reachable from the initial states.
	my %seen = map { $_ => 1 } @initial;
	my @queue = @initial;
	while (@queue)
	{
		my $st = shift @queue;
		for my $t (@{ $edges{$st} })
		{
			push @queue, $t unless $seen{$t}++;
		}
	}
	my %trans;
	for my $st (sort keys %seen)
	{
		$trans{$st} = $edges{$st} if @{ $edges{$st} } || chance(50);
	}
	return { initial => \@initial, trans => \%trans };
}

my @bad_definitions = (
	'[]', '"a"', '7', 'null', '{}',
	'{"initial": ["a"]}',
	'{"transitions": {}}',
	'{"initial": ["a"], "transitions": {}, "extra": 1}',
	'{"initial": "a", "transitions": {}}',
	'{"initial": [], "transitions": {}}',
	'{"initial": ["a", 2], "transitions": {}}',
	'{"initial": ["a", null], "transitions": {}}',
	'{"initial": [""], "transitions": {}}',
	'{"initial": ["a", "a"], "transitions": {}}',
	'{"initial": ["a"], "transitions": []}',
	'{"initial": ["a"], "transitions": {"a": "b"}}',
	'{"initial": ["a"], "transitions": {"a": ["b", "b"]}}',
	'{"initial": ["a"], "transitions": {"a": ["b", 1]}}',
	'{"initial": ["a"], "transitions": {"": ["a"]}}',
	'{"initial": ["a"], "transitions": {"b": ["c"]}}',
	'{"initial": ["a"], "transitions": {"a": ["b"], "c": ["a"]}}');

sub gen_machine_name
{
	return undef if chance(2);
	return '' if chance(2);
	return 'n' x 64 if chance(2);
	return 'n' x 63 if chance(2);
	return pick(@machine_names);
}

sub check_machine_name
{
	my ($name) = @_;
	return '22004' unless defined $name;
	return '22023' if $name eq '';
	return '22001' if length($name) > 63;
	return undef;
}

sub op_define
{
	my $name = gen_machine_name();
	my ($json, $m);
	if (chance(15))
	{
		$json = pick(@bad_definitions);
	}
	elsif (chance(3))
	{
		$json = undef;
	}
	else
	{
		$m    = random_machine();
		$json = machine_json($m);
	}
	my $sql = sprintf('SELECT idem_machine_define(%s, %s::jsonb)', lit($name), lit($json));
	my $e = check_machine_name($name);
	$e //= '22004' unless defined $json;
	$e //= '22023' unless $m;
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'OK', '' ], sub { $state->{machines}{$name} = $m; return; });
}

sub op_drop
{
	my $name = gen_machine_name();
	my $sql  = sprintf('SELECT idem_machine_drop(%s)', lit($name));
	my $e    = check_machine_name($name);
	$e //= '42704' unless $state->{machines}{$name};
	$e //= '2BP01' if $name eq 'gm';
	return ($sql, [ 'ERR', $e ]) if $e;
	return ($sql, [ 'OK', '' ], sub { delete $state->{machines}{$name}; return; });
}

sub gen_state
{
	return undef if chance(5);
	return 'zz' if chance(5);
	return pick(@state_names);
}

sub op_machine_query
{
	my $kind = pick('can', 'transition', 'allows');
	my $name = gen_machine_name();
	my $f    = gen_state();
	my $t    = gen_state();
	$t = $f if chance(10);
	my $fn = { can => 'idem_can_transition', transition => 'idem_transition',
		allows => 'idem_guard_allows' }->{$kind};
	my $sql = sprintf('SELECT %s(%s, %s, %s)', $fn, lit($name), lit($f), lit($t));
	my $e = check_machine_name($name);
	$e //= '42704' unless $state->{machines}{$name};
	return ($sql, [ 'ERR', $e ]) if $e;
	my $m  = $state->{machines}{$name};
	my $st = states_of($m);
	if ($kind eq 'can')
	{
		return ($sql, [ 'OK', 'f' ]) unless defined $f && defined $t;
		return ($sql, [ 'ERR', '22023' ]) unless $st->{$f} && $st->{$t};
		return ($sql, [ 'OK', allows($m, $f, $t) ? 't' : 'f' ]);
	}
	if ($kind eq 'transition')
	{
		return ($sql, [ 'ERR', '22004' ]) unless defined $f && defined $t;
		return ($sql, [ 'ERR', '22023' ]) unless $st->{$f} && $st->{$t};
		return ($sql, [ 'OK', $f ]) if $f eq $t;
		return ($sql, [ 'OK', $t ]) if allows($m, $f, $t);
		return ($sql, [ 'ERR', 'ID004' ]);
	}
	return ($sql, [ 'OK', defined $f ? 'f' : 't' ]) unless defined $t;
	return ($sql, [ 'OK', (grep { $_ eq $t } @{ $m->{initial} }) ? 't' : 'f' ])
	  unless defined $f;
	return ($sql, [ 'OK', 't' ]) if $f eq $t;
	return ($sql, [ 'OK', ($st->{$f} && $st->{$t} && allows($m, $f, $t)) ? 't' : 'f' ]);
}

sub guard_ok
{
	my ($from, $to) = @_;
	my $m  = $state->{machines}{gm};
	my $st = states_of($m);
	return 0 unless defined $to;
	return scalar grep { $_ eq $to } @{ $m->{initial} } unless defined $from;
	return 1 if $from eq $to;
	return $st->{$from} && $st->{$to} && allows($m, $from, $to);
}

sub op_row
{
	my $id   = 1 + rnd(8);
	my $row  = $state->{rows}{$id};
	my $kind = rnd(100);
	if ($kind < 20)
	{
		return (sprintf(q{SELECT coalesce(st, '~') || '|' || v FROM g_rows WHERE id = %d}, $id),
			[ 'OK', $row ? "$row->{st}|$row->{v}" : '' ]);
	}
	if ($kind < 25)
	{
		return ('SELECT count(*) FROM idem_transition_log',
			[ 'OK', $state->{log_count} ]);
	}
	if ($kind < 50 || !$row)
	{
		my $to = gen_state();
		if ($row)
		{
			# An existing id only with a legal state: the key conflict
			# comes first, whatever the order of the checks.
			return op_row() unless guard_ok(undef, $to);
			return (sprintf('INSERT INTO g_rows (id, st) VALUES (%d, %s)', $id, lit($to)),
				[ 'ERR', '23505' ]);
		}
		my $sql = sprintf('INSERT INTO g_rows (id, st) VALUES (%d, %s)', $id, lit($to));
		return ($sql, [ 'ERR', 'ID004' ]) unless guard_ok(undef, $to);
		return ($sql, [ 'OK', '' ],
			sub { $state->{rows}{$id} = { st => $to, v => 0 }; $state->{log_count}++; return; });
	}
	my $to  = gen_state();
	my $sql = sprintf('UPDATE g_rows SET st = %s WHERE id = %d', lit($to), $id);
	return ($sql, [ 'ERR', 'ID004' ]) unless guard_ok($row->{st}, $to);
	return ($sql, [ 'OK', '' ]) if defined $to && $to eq $row->{st};
	return ($sql, [ 'OK', '' ],
		sub { $row->{st} = $to; $row->{v}++; $state->{log_count}++; return; });
}

#--------------------------------------------------------------------------
# Transactions.
#--------------------------------------------------------------------------
sub op_xact
{
	if (!$in_xact)
	{
		my $iso = pick('', '', ' ISOLATION LEVEL REPEATABLE READ');
		return ("BEGIN$iso", [ 'OK', '' ],
			sub {
				$in_xact = 1; $xact_rr = $iso ne ''; $aborted = 0;
				$xact_snapshot = dclone($state); @savepoints = ();
				return;
			});
	}
	my $c = rnd(100);
	if ($c < 30)
	{
		return ('COMMIT', [ 'OK', '' ],
			sub {
				$state = $xact_snapshot if $aborted;
				$in_xact = 0; $aborted = 0; @savepoints = ();
				return;
			});
	}
	if ($c < 45)
	{
		return ('ROLLBACK', [ 'OK', '' ],
			sub { $state = $xact_snapshot; $in_xact = 0; $aborted = 0; @savepoints = (); return; });
	}
	if ($c < 70 && !$aborted)
	{
		my $name = 'sp' . (++$sp_counter);
		return ("SAVEPOINT $name", [ 'OK', '' ],
			sub { push @savepoints, [ $name, dclone($state) ]; return; });
	}
	if (@savepoints && $c < 90)
	{
		my $i    = rnd(scalar @savepoints);
		my $name = $savepoints[$i][0];
		return ("ROLLBACK TO SAVEPOINT $name", [ 'OK', '' ],
			sub {
				splice(@savepoints, $i + 1);
				$state = dclone($savepoints[$i][1]);
				$aborted = 0;
				return;
			});
	}
	if (@savepoints && !$aborted)
	{
		my $i    = rnd(scalar @savepoints);
		my $name = $savepoints[$i][0];
		return ("RELEASE SAVEPOINT $name", [ 'OK', '' ],
			sub { splice(@savepoints, $i); return; });
	}
	return ('COMMIT', [ 'OK', '' ],
		sub {
			$state = $xact_snapshot if $aborted;
			$in_xact = 0; $aborted = 0; @savepoints = ();
			return;
		});
}

#--------------------------------------------------------------------------
# Whole-state comparison.
#--------------------------------------------------------------------------
sub model_dump
{
	my (@recs, @rows, @machines);
	for my $k (keys %{ $state->{recs} })
	{
		my ($scope, $key) = split /\0/, $k, 2;
		my $r = $state->{recs}{$k};
		push @recs, join('|',
			$scope, $key, $r->{status}, $r->{result} // '~', $r->{attempts},
			$r->{fp} // '~', $r->{token} // '~',
			$r->{status} eq 'in_progress' ? 't' : 'f',
			$r->{live} ? 't' : 'f');
	}
	for my $id (keys %{ $state->{rows} })
	{
		push @rows, "row|$id|$state->{rows}{$id}{st}|$state->{rows}{$id}{v}";
	}
	for my $name (keys %{ $state->{machines} })
	{
		my $m = $state->{machines}{$name};
		my $st = states_of($m);
		push @machines, "machine|$name|" . join(',', sort keys %$st);
	}
	# Bytewise order within each part, as COLLATE "C" in the database.
	return join("\n", (sort @recs), (sort @rows), (sort @machines));
}

my $db_dump_sql = q{
SELECT string_agg(l, E'\n' ORDER BY o, l COLLATE "C") FROM (
    SELECT 1, concat_ws('|', scope, key, status, coalesce(result::text, '~'), attempts,
                        coalesce(encode(fingerprint, 'hex'), '~'), coalesce(token::text, '~'),
                        locked_until IS NOT NULL, expires_at > clock_timestamp())
    FROM idem_records
  UNION ALL
    SELECT 2, 'row|' || id || '|' || coalesce(st, '~') || '|' || v FROM g_rows
  UNION ALL
    SELECT 3, 'machine|' || machine || '|' || (
        SELECT string_agg(s, ',' ORDER BY s COLLATE "C") FROM (
            SELECT jsonb_array_elements_text(definition->'initial')
            UNION SELECT jsonb_object_keys(definition->'transitions')
            UNION SELECT jsonb_array_elements_text(t.value)
              FROM jsonb_each(definition->'transitions') t) AS x(s))
    FROM idem_machines
) AS d(o, l)};

#--------------------------------------------------------------------------
# The run.
#--------------------------------------------------------------------------
my @ops = (
	[ \&op_claim,         14 ],
	[ \&op_complete,      5 ],
	[ \&op_lookup,        8 ],
	[ \&op_release,       3 ],
	[ \&op_purge,         2 ],
	[ \&op_begin,         10 ],
	[ \&op_heartbeat,     3 ],
	[ \&op_finish,        6 ],
	[ \&op_fail,          4 ],
	[ \&op_claim_many,    5 ],
	[ \&op_token_issue,   3 ],
	[ \&op_token_consume, 4 ],
	[ \&op_age,           6 ],
	[ \&op_guc,           1 ],
	[ \&op_xact,          8 ],
	[ \&op_define,        3 ],
	[ \&op_drop,          1 ],
	[ \&op_machine_query, 7 ],
	[ \&op_row,           8 ],);
my $total_weight = 0;
$total_weight += $_->[1] for @ops;

my @recent;
my %count;
my $failed = 0;
my $errors = 0;

sub show_recent { return join("\n", map { "  $_" } @recent); }

for my $i (1 .. $nops)
{
	my $w = rnd($total_weight);
	my $op;
	for my $o (@ops)
	{
		if ($w < $o->[1]) { $op = $o->[0]; last; }
		$w -= $o->[1];
	}
	# In an aborted transaction, mostly end it (or roll back to a savepoint).
	$op = \&op_xact if $aborted && !chance(15);

	my ($sql, $expect, $apply) = $op->();
	$expect = [ 'ERR', '25P02' ]
	  if $aborted && $op != \&op_xact;

	my ($kind, $got) = run_sql($sql);
	$count{$kind}++;
	my $ok;
	my $expected_text;
	if ($expect->[0] eq 'ERR')
	{
		$expected_text = "ERROR $expect->[1]";
		$ok = $kind eq 'ERR' && $got eq $expect->[1];
		if ($ok && $in_xact)
		{
			$aborted = 1;
		}
		$errors++ if $ok;
	}
	else
	{
		my $want = $expect->[1];
		if (ref $want eq 'Regexp')
		{
			$expected_text = "output matching $want";
			$ok = $kind eq 'OK' && $got =~ $want;
			if ($ok)
			{
				my $value = $1;
				if ($sql =~ /idem_begin/)
				{
					$ok = $value > $max_token;
					$expected_text .= " with a token greater than $max_token";
					$max_token = $value if $ok;
				}
				$apply->($value) if $ok;
			}
		}
		else
		{
			$want = $apply->() if !defined $want && $apply;
			$expected_text = "output '$want'";
			$ok = $kind eq 'OK' && $got eq $want;
			$apply->() if $ok && $apply && defined $expect->[1];
		}
	}
	push @recent, "#$i $sql => " . ($kind eq 'ERR' ? "ERROR $got" : "'$got'");
	shift @recent if @recent > 25;
	if (!$ok)
	{
		fail("operation $i agrees with the model");
		diag("seed $seed, operation $i:\n  $sql\nexpected $expected_text, got "
			  . ($kind eq 'ERR' ? "ERROR $got" : "'$got'")
			  . "\nrecent operations:\n" . show_recent());
		$failed = 1;
		last;
	}

	if (!$in_xact && $i % 250 == 0)
	{
		my ($k2, $dump) = run_sql($db_dump_sql);
		my $db = $dump;
		# The database says whether a record is live by its clock; the
		# model by the simulated expiries.
		my $model = model_dump();
		if ($db ne $model)
		{
			fail("state after operation $i agrees with the model");
			diag("seed $seed: database state:\n$db\nmodel state:\n$model\nrecent operations:\n"
				  . show_recent());
			$failed = 1;
			last;
		}
	}
}

if (!$failed)
{
	pass("$nops operations agree with the model");
	if ($in_xact)
	{
		run_sql('ROLLBACK');
		$state = $xact_snapshot;
	}
	my ($k2, $db) = run_sql($db_dump_sql);
	is($db, model_dump(), 'the final state agrees with the model');
}
note "outcomes: " . join(', ', map { "$_ $count{$_}" } sort keys %count)
  . "; expected errors $errors";
cmp_ok($errors, '>', $nops / 50, 'error paths were exercised') unless $failed;

$s->quit;
$node->stop;
done_testing();
