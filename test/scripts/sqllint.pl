#!/usr/bin/perl
# sqllint.pl: the security lint of every SQL and PL/pgSQL line we ship
# (run by test/scripts/lint.sh as its tool "sql"; see docs/security.md).
#
# Usage: sqllint.pl FILE...   (SQLLINT_PSQL: the psql command line of a
#        database that has sqllint_parse(text, int4), test/lint/sqllint.c)
#
# Every file is parsed by PostgreSQL's own raw parser (sqllint_parse: the
# tree the grammar builds before any name is looked up, so it says exactly
# whether a name was written schema-qualified).  The body of every
# LANGUAGE sql function is parsed as statements; the body of every
# PL/pgSQL function and DO block is cut into its statements here (the
# PL/pgSQL grammar is small: blocks, IF, CASE, loops, RETURN, RAISE, ...)
# and each expression, query and declared type is parsed by the raw
# parser in the mode PL/pgSQL itself uses (RAW_PARSE_PLPGSQL_EXPR,
# RAW_PARSE_TYPE_NAME, statements).  Findings, as FILE:LINE: [rule] text:
#
#  unqualified  in a function body or DO block whose search_path is not
#               pinned (SET search_path = pg_catalog, pg_temp): a type
#               (DECLARE, ::t, CAST(x AS t), %ROWTYPE, table.col%TYPE), a
#               function call, an operator (also the ones SQL hides: LIKE,
#               IN (...), = ANY, BETWEEN, NULLIF, IS DISTINCT FROM, a simple
#               CASE x WHEN), a collation or a relation without a schema,
#               a name without a schema in 'name'::regclass (regproc, ...)
#               or nextval('name'); a relation without a schema also where
#               search_path is pinned (pg_temp, last on it, is any role's);
#  untyped      a call of one of our own functions (every function the
#               scripts create) with an argument whose type is not given:
#               each argument must be a cast to the declared parameter type
#               (x::pg_catalog.text, CAST(x AS ...)), NULL and literals
#               included, or a parameter or variable declared with exactly
#               that type; a cast to another type is reported too;
#  unqualified-own  a call of one of our own functions not written
#               @extschema@.f (anywhere, pinned search_path or not).
# Top-level statements of the scripts (run by CREATE/ALTER EXTENSION with
# the extension's schema and pg_catalog on the path) are checked for the
# last two rules.  A line may carry the comment
#   -- sqllint: allow <rule> -- reason
# to accept one finding of that rule on that line (keep these rare).
use strict;
use warnings;
use File::Temp qw(tempfile);

my $psql = $ENV{SQLLINT_PSQL} or die "sqllint.pl: SQLLINT_PSQL is not set\n";
# released:FILE: a script of a release that is out.  Its function bodies
# are not read: every later upgrade replaces them, and the catalog after
# the upgrades is the fresh install's (test/t/009_upgrade.pl), whose
# sources are linted; what it runs at CREATE/ALTER EXTENSION time (DO
# blocks, top-level statements) is read as everywhere.
my (%released, @files);
for my $a (@ARGV) {
    if ($a =~ /^released:(.*)$/) { $released{$1} = 1; push @files, $1 } else { push @files, $a }
}
@files or die "usage: sqllint.pl [released:]FILE...\n";

my (%src, %linestarts, %label, @lintfiles);
my @findings;
my $crefused = 0;

# ---------------------------------------------------------------- parser
# Parse many fragments in one psql call: [text, mode] -> tree string or
# "ERROR: message".
sub parse_batch {
    my @frags = @_;
    return () unless @frags;
    my ($fh, $fname) = tempfile('sqllint-XXXXXX', TMPDIR => 1, UNLINK => 1);
    binmode $fh;
    my $i = 0;
    for my $f (@frags) {
        my $t = $f->[0];
        $t =~ s/\\/\\\\/g; $t =~ s/\n/\\n/g; $t =~ s/\r/\\r/g; $t =~ s/\t/\\t/g;
        print $fh $i++, "\t", $f->[1], "\t", $t, "\n";
    }
    close $fh;
    chmod 0644, $fname;
    my $sql = <<"EOS";
SET client_min_messages = error;
CREATE TEMP TABLE f (id int, mode int, t text);
\\copy f FROM '$fname'
CREATE FUNCTION pg_temp.try(t text, mode int) RETURNS text LANGUAGE plpgsql AS \$b\$
BEGIN RETURN sqllint_parse(t, mode);
EXCEPTION WHEN OTHERS THEN RETURN 'ERROR: ' || SQLERRM; END \$b\$;
COPY (SELECT id, pg_temp.try(t, mode) FROM f ORDER BY id) TO STDOUT;
EOS
    my ($sh, $sname) = tempfile('sqllint-XXXXXX', TMPDIR => 1, UNLINK => 1);
    print $sh $sql;
    close $sh;
    chmod 0644, $sname;
    my $out = `$psql -X -q -v ON_ERROR_STOP=1 -f '$sname'`;
    die "sqllint.pl: psql failed\n" if $?;
    my @res;
    for my $line (split /\n/, $out) {
        my ($id, $t) = split /\t/, $line, 2;
        $t =~ s/\\(.)/$1 eq 'n' ? "\n" : $1 eq 't' ? "\t" : $1 eq 'r' ? "\r" : $1/ge;
        $res[$id] = $t;
    }
    die "sqllint.pl: psql returned " . scalar(@res) . " results for " . scalar(@frags) . " fragments\n"
        unless @res == @frags;
    return @res;
}

# nodeToString output -> Perl: a node is a hash {_t => TYPE, field => value},
# a list an array, an atom a string (quoted strings unquoted).
sub read_tree {
    my ($s) = @_;
    my @tok = $s =~ /("(?:[^"\\]|\\.)*"|[{}()]|:\w+|(?:\\.|[^\s{}()"\\])+)/gs;
    my $pos = 0;
    my $value;
    $value = sub {
        my $t = $tok[$pos++];
        return undef unless defined $t;
        if ($t eq '{') {
            if (($tok[$pos] // '}') eq '}') { $pos++; return {_t => ''} }
            my %n = (_t => $tok[$pos++]);
            $n{_t} = 'AEXPR' if $n{_t} eq 'A_EXPR';     # PostgreSQL 16 on
            while ($pos < @tok && $tok[$pos] ne '}') {
                if ($tok[$pos] =~ /^:(\w+)$/) {
                    my $name = $1;
                    $pos++;
                    if ($pos < @tok && ($tok[$pos] =~ /^:\w+$/ || $tok[$pos] eq '}')) {
                        $n{$name} = '';
                    } else {
                        $n{$name} = $value->();
                    }
                } else {
                    push @{$n{_extra}}, $value->();
                }
            }
            $pos++;
            return \%n;
        } elsif ($t eq '(') {
            my @l;
            push @l, $value->() while $pos < @tok && $tok[$pos] ne ')';
            $pos++;
            return \@l;
        } elsif ($t =~ /^"(.*)"$/s) {
            (my $v = $1) =~ s/\\(.)/$1/gs;
            return $v;
        } else {
            (my $v = $t) =~ s/\\(.)/$1/gs;
            return $v eq '<>' ? undef : $v;
        }
    };
    return $value->();
}

sub strs { my ($l) = @_; return ref $l eq 'ARRAY' ? grep { !ref } @$l : (); }

# Every node below $n (depth first), with its parent chain.
sub walk {
    my ($n, $cb, $parents) = @_;
    $parents ||= [];
    if (ref $n eq 'HASH') {
        $cb->($n, $parents);
        push @$parents, $n;
        for my $k (sort keys %$n) { walk($n->{$k}, $cb, $parents) if ref $n->{$k}; }
        pop @$parents;
    } elsif (ref $n eq 'ARRAY') {
        walk($_, $cb, $parents) for @$n;
    }
}

# ---------------------------------------------------------------- source
sub line_of {
    my ($file, $off) = @_;
    my $ls = $linestarts{$file};
    my ($lo, $hi) = (0, $#$ls);
    while ($lo < $hi) {
        my $mid = int(($lo + $hi + 1) / 2);
        if ($ls->[$mid] <= $off) { $lo = $mid } else { $hi = $mid - 1 }
    }
    return $lo + 1;
}

sub line_text {
    my ($file, $line) = @_;
    my $ls = $linestarts{$file};
    my $s = $ls->[$line - 1];
    my $e = $line < @$ls ? $ls->[$line] - 1 : length $src{$file};
    return substr($src{$file}, $s, $e - $s);
}

sub finding {
    my ($ctx, $loc, $rule, $msg) = @_;
    my $file = $ctx->{file};
    my $off = $ctx->{base} + (defined $loc && $loc >= 0 ? $loc : 0);
    $off = $ctx->{map}[$loc // 0] // $ctx->{map}[-1] if $ctx->{map};
    my $line = line_of($file, $off);
    my $text = line_text($file, $line);
    return if $text =~ m{(?:--|/\*)\s*sqllint:\s*allow\s+\Q$rule\E\b};
    (my $shown = $text) =~ s/^\s+|\s+$//g;
    $shown =~ s/\bxextschemax\b/\@extschema@/g;
    $msg =~ s/\bxextschemax\b/\@extschema@/g;
    push @findings, sprintf("%s:%d: [%s] %s\n    %s\n", $ctx->{label} // $file, $line, $rule, $msg, $shown);
}

# ---------------------------------------------------------------- types
my %alias = (integer => 'int4', int => 'int4', bigint => 'int8', smallint => 'int2',
             boolean => 'bool', real => 'float4', 'double precision' => 'float8');

sub typename_norm {
    my ($tn) = @_;
    my @n = strs($tn->{names});
    my $t = lc($n[-1] // '?');
    $t = $alias{$t} // $t;
    $t .= '[]' if ref $tn->{arrayBounds} && @{$tn->{arrayBounds}};
    return $t;
}

sub typename_text { my ($tn) = @_; return join('.', strs($tn->{names})) . ((ref $tn->{arrayBounds} && @{$tn->{arrayBounds}}) ? '[]' : ''); }

# ---------------------------------------------------------------- round 1
my %own;        # function name -> [ {params => [[name, type, hasdefault]...]} ]
my @units;      # bodies to check: {ctx, kind => plpgsql|sql, body, bodyoff, params}
my @toplevel;   # [ctx, tree]

for my $file (@files) {
    push @lintfiles, $file;
    open my $fh, '<:raw', $file or die "sqllint.pl: $file: $!\n";
    local $/;
    my $s = <$fh>;
    close $fh;
    # Same-length stand-ins keep every offset: @extschema@ -> xextschemax,
    # psql's backslash lines blanked.
    $s =~ s/\@(\w+)\@/x$1x/g;
    $s =~ s/^(\\[^\n]*)/' ' x length($1)/gme;
    $src{$file} = $s;
    my @ls = (0);
    push @ls, $-[0] + 1 while $s =~ /\n/g;
    $linestarts{$file} = \@ls;
    # A script embedded in a string (the portable plain script, the pg_tle
    # script) is linted as a file of its own: the file with everything
    # outside the string blanked, so that offsets and lines stay true.
    my $n = 0;
    for my $r (embedded_scripts($s, 0, length $s)) {
        my ($st, $en) = @$r;
        my $v = substr($s, 0, $st) =~ s/[^\n]/ /gr . substr($s, $st, $en - $st) . substr($s, $en) =~ s/[^\n]/ /gr;
        my $key = "$file#" . ++$n;
        $src{$key} = $v; $linestarts{$key} = \@ls; $label{$key} = $file;
        push @lintfiles, $key;
    }
}

sub embedded_scripts {
    my ($s, $from, $to) = @_;
    my @found;
    pos($s) = $from;
    while ($s =~ /\G.*?(\$[A-Za-z_]\w*\$)/gcs && pos($s) <= $to) {
        my $tag = $1;
        my $st = pos($s);
        my $en = index($s, $tag, $st);
        last if $en < 0 || $en > $to;
        my @inner = embedded_scripts($s, $st, $en);
        if (@inner) { push @found, @inner }
        elsif (substr($s, $st, $en - $st) =~ /^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|TABLE)\b/mi) { push @found, [$st, $en] }
        pos($s) = $en + length $tag;
    }
    return @found;
}

# C sources: their SQL string literals are fragments of their own (below).
my @cfiles = grep { /\.c$/ } @lintfiles;
@lintfiles = grep { !/\.c$/ } @lintfiles;
my @trees = parse_batch(map { [$src{$_}, 0] } @lintfiles);
for my $i (0 .. $#lintfiles) {
    my $file = $lintfiles[$i];
    my $ctx = {file => $file, base => 0, label => $label{$file}};
    if ($trees[$i] =~ /^ERROR: (.*)/s) {
        finding($ctx, 0, 'parse', "the raw parser refused the file: $1");
        next;
    }
    my $tree = read_tree($trees[$i]);
    push @toplevel, [$ctx, $tree];
    walk($tree, sub {
        my ($n) = @_;
        if ($n->{_t} eq 'CREATEFUNCTIONSTMT') {
            my @name = strs($n->{funcname});
            my (@params, %opt);
            for my $p (@{$n->{parameters} || []}) {
                my $mode = $p->{mode} // 'i';
                $mode = chr($mode) if $mode =~ /^\d+$/;
                push @params, {name => $p->{name}, type => typename_norm($p->{argType}),
                               def => defined $p->{defexpr}, mode => $mode};
            }
            for my $o (@{$n->{options} || []}) { $opt{lc $o->{defname}} = $o if ref $o eq 'HASH'; }
            my @in = grep { $_->{mode} =~ /^[ibvd]$/ } @params;
            push @{$own{lc $name[-1]}}, \@in if !@name || @name == 1 || $name[0] eq 'xextschemax';
            my $lang = $opt{language} ? lc($opt{language}{arg}) : 'sql';
            my $pinned = 0;
            if (my $set = $opt{set}) {
                my $vs = $set->{arg};
                if (ref $vs eq 'HASH' && lc($vs->{name} // '') eq 'search_path') {
                    my @path = map { ref $_ eq 'HASH' ? ($_->{sval} // $_->{val} // '') : $_ } @{$vs->{args} || []};
                    $pinned = 1 if "@path" eq 'pg_catalog pg_temp';
                }
            }
            my $uctx = {file => $file, label => $label{$file}, base => 0, pinned => $pinned, body => 1,
                        func => join('.', @name), params => \@params};
            if ($released{$file}) {
                # a released script's bodies: see released: above
            } elsif ($n->{sql_body}) {
                push @units, {ctx => $uctx, kind => 'tree', tree => delete $n->{sql_body}};
            } elsif ($opt{as} && ($lang eq 'plpgsql' || $lang eq 'sql')) {
                push @units, {ctx => $uctx, kind => $lang, loc => $opt{as}{location}};
            }
        } elsif ($n->{_t} eq 'DOSTMT') {
            my %opt;
            for my $o (@{$n->{args} || []}) { $opt{lc $o->{defname}} = $o if ref $o eq 'HASH'; }
            my $lang = $opt{language} ? lc($opt{language}{arg}) : 'plpgsql';
            push @units, {ctx => {file => $file, label => $label{$file}, base => 0, pinned => 0, body => 1, func => 'DO block', params => []},
                          kind => $lang, loc => $opt{as}{location}} if $opt{as};
        }
    });
}

# The body's text and offset in the file, from the location of AS (or of
# the DO block's string): a dollar-quoted string as it is, a quoted one
# with its doubled quotes (then offsets inside may drift by a character
# per doubled quote: the line stays right).
sub body_at {
    my ($file, $loc) = @_;
    my $s = $src{$file};
    pos($s) = $loc;
    $s =~ /\G(?:AS\b)?(?:\s|--[^\n]*\n)*/gci;
    if ($s =~ /\G(\$(?:[A-Za-z_]\w*)?\$)/gc) {
        my $tag = $1;
        my $start = pos($s);
        my $end = index($s, $tag, $start);
        return (substr($s, $start, $end - $start), $start) if $end >= 0;
    } elsif ($s =~ /\G[Ee]?'((?:[^']|'')*)'/gc) {
        (my $b = $1) =~ s/''/'/g;
        return ($b, $-[1]);
    }
    return;
}

# ---------------------------------------------------------------- PL/pgSQL
# Tokens of a PL/pgSQL body: [kind, text, start, end]; kind is w (word),
# q (quoted identifier), s (string), n (number), p (punctuation/operator).
sub tokenize {
    my ($b) = @_;
    my @t;
    pos($b) = 0;
    while (pos($b) < length $b) {
        if ($b =~ /\G\s+/gc || $b =~ /\G--[^\n]*/gc) { next }
        my $st = pos($b);
        if ($b =~ /\G\/\*/gc) {
            my $depth = 1;
            while ($depth && $b =~ /\G.*?(\/\*|\*\/)/gcs) { $depth += $1 eq '/*' ? 1 : -1 }
            pos($b) = length $b if $depth;
            next;
        }
        if ($b =~ /\G(\$(?:[A-Za-z_]\w*)?\$)/gc) {
            my $tag = $1; my $e = index($b, $tag, pos($b));
            $e = length($b) - length($tag) if $e < 0;
            pos($b) = $e + length $tag;
            push @t, ['s', substr($b, $st, pos($b) - $st), $st, pos($b)];
        } elsif ($b =~ /\G[Ee]'(?:[^'\\]|''|\\.)*'/gc || $b =~ /\G(?:[BbXxNn]|[Uu]&)?'(?:[^']|'')*'/gc) {
            push @t, ['s', substr($b, $st, pos($b) - $st), $st, pos($b)];
        } elsif ($b =~ /\G"(?:[^"]|"")*"/gc) {
            push @t, ['q', substr($b, $st, pos($b) - $st), $st, pos($b)];
        } elsif ($b =~ /\G[A-Za-z_\x80-\xff][\w\$\x80-\xff]*/gc) {
            push @t, ['w', substr($b, $st, pos($b) - $st), $st, pos($b)];
        } elsif ($b =~ /\G(?:\d+(?:\.(?!\.)\d*)?(?:[eE][+-]?\d+)?|\$\d+)/gc) {
            push @t, ['n', substr($b, $st, pos($b) - $st), $st, pos($b)];
        } elsif ($b =~ /\G(?::=|::|\.\.|=>|<<|>>|[-+*\/<>=~!\@#%^&|`?]+|.)/gcs) {
            push @t, ['p', substr($b, $st, pos($b) - $st), $st, pos($b)];
        }
    }
    return @t;
}

# Plain (non-quoted, non-string) upper-case word at token $i, or ''.
sub kw { my ($t, $i) = @_; return ($i < @$t && $t->[$i][0] eq 'w') ? uc $t->[$i][1] : ''; }

# Index of the first token at or after $i, at paren depth 0, satisfying
# $stop (a sub taking the index); or the number of tokens.
sub scan_to {
    my ($t, $i, $stop) = @_;
    my $depth = 0;
    for (; $i < @$t; $i++) {
        my $x = $t->[$i][1];
        if ($t->[$i][0] eq 'p') {
            if ($x eq '(' || $x eq '[') { $depth++; next }
            if ($x eq ')' || $x eq ']') { $depth--; next }
        }
        if ($depth == 0) {
            if ($t->[$i][0] eq 'w' && uc($x) eq 'CASE' && !($i > 0 && kw($t, $i - 1) eq 'END')) {   # CASE ... END in an expression
                my $d = 0;
                for (; $i < @$t; $i++) {
                    my $k = kw($t, $i);
                    $d++ if $k eq 'CASE';
                    if ($k eq 'END') { $d--; last if $d == 0 }
                }
                next;
            }
            return $i if $stop->($i);
        }
    }
    return scalar @$t;
}

sub stop_kw { my ($t, @k) = @_; my %k = map { $_ => 1 } @k; return sub { $k{kw($t, $_[0])} || ($t->[$_[0]][0] eq 'p' && $k{$t->[$_[0]][1]}) } }

# Split a PL/pgSQL body into fragments for the raw parser:
# [text, mode, offset of text in the body, what].  Also collects the
# declared variables (name -> type fragment index) in $vars.
sub plpgsql_fragments {
    my ($b, $ctx, $frags, $decls) = @_;
    my @t = tokenize($b);
    my $t = \@t;
    my @stack;          # block | if | loop | case | exc
    my $add = sub {     # tokens [$i, $j) as one fragment
        my ($i, $j, $mode, $what, $prefix) = @_;
        return if $j <= $i;
        my $s = $t->[$i][2]; my $e = $t->[$j - 1][3];
        my $text = substr($b, $s, $e - $s);
        $prefix //= '';
        push @$frags, [$prefix . $text, $mode, $s - length($prefix), $what];
    };
    my $exprs = sub {   # comma-separated expressions in [$i, $j)
        my ($i, $j, $what) = @_;
        while ($i < $j) {
            my $k = scan_to($t, $i, stop_kw($t, ','));
            $k = $j if $k > $j;
            $add->($i, $k, 2, $what);
            $i = $k + 1;
        }
    };
    my $semi = sub { scan_to($t, $_[0], stop_kw($t, ';')) };
    # Dynamic SQL: the format string of every format() whose text starts
    # like a statement, and a literal after EXECUTE, parsed with each
    # placeholder (%I, %s, %L, %1$I...) written as an identifier.  One the
    # parser refuses (a placeholder standing for a keyword or a list) is
    # left out.
    for my $q (0 .. $#t - 2) {
        my $lit;
        if (kw($t, $q) eq 'FORMAT' && $t[$q + 1][1] eq '(' && $t[$q + 2][0] eq 's') { $lit = $q + 2 }
        elsif (kw($t, $q) eq 'EXECUTE' && $t[$q + 1][0] eq 's') { $lit = $q + 1 }
        next unless defined $lit;
        my ($text, $start) = ($t[$lit][1], $t[$lit][2]);
        my $content;
        if ($text =~ /^(\$\w*\$)(.*)\1$/s) { $content = $2; $start += length $1 }
        elsif ($text =~ /^'(.*)'$/s) { ($content = $1) =~ s/''/'/g; $start += 1 }
        else { next }
        next unless $content =~ /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|GRANT|REVOKE|COMMENT|LOCK|TRUNCATE|CALL)\b/i;
        $content =~ s/%(?:\d+\\$)?-?\d*[IsL]/xq/g;
        $content =~ s/%%/%/g;
        push @$frags, [$content, 0, $start, 'dynamic SQL'];
    }
    my $declare = 0;
    my $i = 0;
    while ($i < @t) {
        my $k = kw($t, $i);
        my $x = $t[$i][1];
        if ($t[$i][0] eq 'p' && $x eq '<<') { $i += 3; next }
        if ($t[$i][0] eq 'p' && $x eq ';') { $i++; next }
        if ($k eq 'DECLARE') { $declare = 1; $i++; next }
        if ($k eq 'BEGIN') { $declare = 0; push @stack, 'block'; $i++; next }
        if ($declare) {
            # name [CONSTANT] type [COLLATE c] [NOT NULL] [:= | = | DEFAULT expr];
            # name ALIAS FOR x;  name [NO] [SCROLL] CURSOR [(args)] FOR|IS query;
            my $name = $x; $name =~ s/^"(.*)"$/$1/ or $name = lc $name;
            my $j = $i + 1;
            my $end = $semi->($j);
            $j++ if kw($t, $j) eq 'CONSTANT';
            if (kw($t, $j) eq 'ALIAS') { $i = $end + 1; next }
            my $c = scan_to($t, $j, sub { my $q = kw($t, $_[0]); $q eq 'CURSOR' || $q eq 'FOR' || $q eq 'IS' });
            if ($c < $end && kw($t, $c) eq 'CURSOR' || kw($t, $j) =~ /^(NO|SCROLL|CURSOR)$/) {
                my $f = scan_to($t, $j, stop_kw($t, 'FOR', 'IS'));
                $add->($f + 1, $end, 0, 'cursor query') if $f < $end;
                $i = $end + 1; next;
            }
            my $te = scan_to($t, $j, sub { my $q = kw($t, $_[0]); $q eq 'COLLATE' || $q eq 'NOT' || $q eq 'DEFAULT'
                                     || ($t->[$_[0]][0] eq 'p' && $t->[$_[0]][1] =~ /^(:=|=|;)$/) });
            $te = $end if $te > $end;
            if ($te > $j && $t[$te - 1][0] eq 'w' && $t[$te - 2][1] eq '%') {
                my $what = uc $t[$te - 1][1];
                my @names = map { $_->[1] } grep { $_->[0] ne 'p' } @t[$j .. $te - 3];
                push @$frags, ['', -1, $t[$j][2], "$what:" . join('.', @names)];
                $decls->{$name} = undef;
            } else {
                $add->($j, $te, 1, 'type');
                $decls->{$name} = $#$frags;
            }
            my $d = scan_to($t, $te, sub { my $q = kw($t, $_[0]); $q eq 'DEFAULT' || ($t->[$_[0]][0] eq 'p' && $t->[$_[0]][1] =~ /^(:=|=)$/) });
            $add->($d + 1, $end, 2, 'default') if $d < $end;
            if (kw($t, $te) eq 'COLLATE') {
                my $ce = scan_to($t, $te + 1, sub { my $q = kw($t, $_[0]); $q eq 'NOT' || $q eq 'DEFAULT' || ($t->[$_[0]][0] eq 'p' && $t->[$_[0]][1] =~ /^(:=|=|;)$/) });
                my @names = map { $_->[1] } grep { $_->[0] ne 'p' } @t[$te + 1 .. $ce - 1];
                push @$frags, ['', -1, $t[$te + 1][2], 'COLLATE:' . join('.', @names)];
            }
            $i = $end + 1; next;
        }
        if ($k eq 'END') {
            pop @stack;
            $i = $semi->($i) + 1; next;
        }
        if ($k eq 'EXCEPTION') { $stack[-1] = 'exc' if @stack; $i++; next }
        if ($k eq 'ELSE') { $i++; next }
        if ($k eq 'IF' || $k eq 'ELSIF' || $k eq 'ELSEIF') {
            push @stack, 'if' if $k eq 'IF';
            my $j = scan_to($t, $i + 1, stop_kw($t, 'THEN'));
            $add->($i + 1, $j, 2, 'condition');
            $i = $j + 1; next;
        }
        if ($k eq 'WHEN') {
            my $j = scan_to($t, $i + 1, stop_kw($t, 'THEN'));
            $exprs->($i + 1, $j, 'case value') if @stack && $stack[-1] eq 'case';
            $i = $j + 1; next;
        }
        if ($k eq 'CASE') {
            push @stack, 'case';
            my $j = scan_to($t, $i + 1, stop_kw($t, 'WHEN'));
            if ($j > $i + 1) {
                $add->($i + 1, $j, 2, 'case selector');
                push @$frags, ['', -1, $t[$i][2], 'SIMPLECASE'];
            }
            $i = $j; next;
        }
        if ($k eq 'LOOP') { push @stack, 'loop'; $i++; next }
        if ($k eq 'WHILE') {
            push @stack, 'loop';
            my $j = scan_to($t, $i + 1, stop_kw($t, 'LOOP'));
            $add->($i + 1, $j, 2, 'condition');
            $i = $j + 1; next;
        }
        if ($k eq 'FOR' || $k eq 'FOREACH') {
            push @stack, 'loop';
            my $in = scan_to($t, $i + 1, stop_kw($t, 'IN'));
            my $lp = scan_to($t, $in + 1, stop_kw($t, 'LOOP'));
            my $j = $in + 1;
            if ($k eq 'FOREACH') {
                $j++ if kw($t, $j) eq 'ARRAY';
                $add->($j, $lp, 2, 'array');
            } elsif (kw($t, $j) eq 'EXECUTE') {
                my $u = scan_to($t, $j + 1, stop_kw($t, 'USING', 'LOOP'));
                $add->($j + 1, $u, 2, 'dynamic query');
                $exprs->($u + 1, $lp, 'USING argument') if $u < $lp;
            } else {
                my $dd = scan_to($t, $j, stop_kw($t, '..', 'LOOP'));
                if ($dd < $lp) {
                    $j++ if kw($t, $j) eq 'REVERSE';
                    $add->($j, $dd, 2, 'loop bound');
                    my $by = scan_to($t, $dd + 1, stop_kw($t, 'BY', 'LOOP'));
                    $add->($dd + 1, $by, 2, 'loop bound');
                    $add->($by + 1, $lp, 2, 'loop step') if $by < $lp;
                } else {
                    $add->($j, $lp, 0, 'query');
                }
            }
            $i = $lp + 1; next;
        }
        my $end = $semi->($i);
        if ($k eq 'EXIT' || $k eq 'CONTINUE') {
            my $w = scan_to($t, $i + 1, stop_kw($t, 'WHEN', ';'));
            $add->($w + 1, $end, 2, 'condition') if $w < $end;
        } elsif ($k eq 'RETURN') {
            my $n = kw($t, $i + 1);
            if ($n eq 'NEXT') { $add->($i + 2, $end, 2, 'RETURN NEXT') }
            elsif ($n eq 'QUERY' && kw($t, $i + 2) eq 'EXECUTE') {
                my $u = scan_to($t, $i + 3, stop_kw($t, 'USING', ';'));
                $add->($i + 3, $u, 2, 'dynamic query');
                $exprs->($u + 1, $end, 'USING argument') if $u < $end;
            }
            elsif ($n eq 'QUERY') { $add->($i + 2, $end, 0, 'RETURN QUERY') }
            else { $add->($i + 1, $end, 2, 'RETURN') }
        } elsif ($k eq 'RAISE') {
            my $j = $i + 1;
            $j++ if kw($t, $j) =~ /^(DEBUG|LOG|INFO|NOTICE|WARNING|EXCEPTION)$/;
            my $u = scan_to($t, $j, stop_kw($t, 'USING', ';'));
            if ($j < $u && $t[$j][0] eq 's') { $exprs->($j + 2, $u, 'RAISE argument') }
            if ($u < $end) {
                my $p = $u + 1;
                while ($p < $end) {
                    my $c = scan_to($t, $p, stop_kw($t, ',', ';'));
                    $c = $end if $c > $end;
                    $add->($p + 2, $c, 2, 'RAISE option') if $t[$p + 1][1] =~ /^(=|:=)$/;
                    $p = $c + 1;
                }
            }
        } elsif ($k eq 'ASSERT') {
            $exprs->($i + 1, $end, 'ASSERT');
        } elsif ($k eq 'PERFORM') {
            $add->($i + 1, $end, 0, 'PERFORM', 'SELECT ');
        } elsif ($k eq 'EXECUTE') {
            my $u = scan_to($t, $i + 1, stop_kw($t, 'INTO', 'USING', ';'));
            $add->($i + 1, $u, 2, 'dynamic query');
            my $us = scan_to($t, $i + 1, stop_kw($t, 'USING', ';'));
            if ($us < $end) {
                my $ui = scan_to($t, $us + 1, stop_kw($t, 'INTO', ';'));
                $exprs->($us + 1, $ui, 'USING argument');
            }
        } elsif ($k eq 'OPEN') {
            my $f = scan_to($t, $i + 1, stop_kw($t, 'FOR', ';'));
            if ($f < $end && kw($t, $f + 1) eq 'EXECUTE') { $add->($f + 2, $end, 2, 'dynamic query') }
            elsif ($f < $end) { $add->($f + 1, $end, 0, 'cursor query') }
        } elsif ($k =~ /^(GET|NULL|COMMIT|ROLLBACK|FETCH|MOVE|CLOSE)$/) {
            # nothing to parse
        } else {
            # An assignment (target [. field | [subscript]]... := expr) or
            # an SQL statement (its INTO target list blanked out).
            my $a = $i;
            if ($t[$a][0] =~ /^[wq]$/) {
                $a++;
                while ($a < $end) {
                    if ($t[$a][1] eq '.' && $t[$a][0] eq 'p') { $a += 2 }
                    elsif ($t[$a][1] eq '[' && $t[$a][0] eq 'p') {
                        my $d = 0;
                        for (; $a < $end; $a++) {
                            next unless $t[$a][0] eq 'p';
                            $d++ if $t[$a][1] eq '[';
                            if ($t[$a][1] eq ']') { $d--; if ($d == 0) { $a++; last } }
                        }
                    }
                    else { last }
                }
            }
            if ($a < $end && $a > $i && $t[$a][0] eq 'p' && $t[$a][1] =~ /^(:=|=)$/) {
                $add->($a + 1, $end, 2, 'assignment');
            } else {
                my $text = substr($b, $t[$i][2], $t[$end - 1][3] - $t[$i][2]);
                # INTO [STRICT] target[, target]... (not INSERT INTO, MERGE INTO)
                my $into = -1;
                for (my $q = scan_to($t, $i, stop_kw($t, 'INTO', ';')); $q < $end;
                     $q = scan_to($t, $q + 1, stop_kw($t, 'INTO', ';'))) {
                    my $prev = kw($t, $q - 1);
                    next if $prev eq 'INSERT' || $prev eq 'MERGE';
                    $into = $q; last;
                }
                if ($into >= 0) {
                    my $q = $into + 1;
                    $q++ if kw($t, $q) eq 'STRICT';
                    $q++;
                    $q += 2 while $q + 1 < $end && $t[$q][1] =~ /^[.,]$/;
                    my ($s, $e) = ($t[$into][2] - $t[$i][2], $t[$q - 1][3] - $t[$i][2]);
                    substr($text, $s, $e - $s) = ' ' x ($e - $s);
                }
                push @$frags, [$text, 0, $t[$i][2], 'statement'];
            }
        }
        $i = $end + 1;
    }
}

# ---------------------------------------------------------------- checks
my %skipfunc;   # nothing yet

sub check_tree {
    my ($tree, $ctx) = @_;
    my %cte;
    walk($tree, sub { my ($n) = @_; $cte{lc $n->{ctename}} = 1 if $n->{_t} eq 'COMMONTABLEEXPR' && defined $n->{ctename}; });
    my $r1 = $ctx->{body} && !$ctx->{pinned};
    walk($tree, sub {
        my ($n, $parents) = @_;
        my $t = $n->{_t};
        my $loc = $n->{location};
        if ($t eq 'FUNCCALL') {
            my @name = strs($n->{funcname});
            my $own = $own{lc $name[-1]};
            if ($own) {
                finding($ctx, $loc, 'unqualified-own', "call of our function $name[-1]() not written \@extschema@.$name[-1]")
                    if $name[0] ne 'xextschemax';
                check_args($n, $own, $ctx, $name[-1]);
            } elsif ($r1 && @name == 1) {
                finding($ctx, $loc, 'unqualified', "function $name[0]() resolved through search_path (write pg_catalog.$name[0] or pin search_path)");
            }
            # nextval('seq') and friends: a text argument becomes a regclass
            # looked up through search_path when it runs.
            if ($r1 && lc($name[-1]) =~ /^(nextval|currval|setval)$/ && ref $n->{args} eq 'ARRAY') {
                my $a = $n->{args}[0];
                my $v = ref $a eq 'HASH' && $a->{_t} eq 'A_CONST' ? ($a->{sval} // $a->{val}) : undef;
                finding($ctx, $a->{location} // $loc, 'unqualified', "$name[-1]('$v') looks the sequence up through search_path (write the schema in the string)")
                    if defined $v && !ref $v && $v !~ /\./;
            }
        } elsif ($t eq 'TYPENAME' && $r1) {
            my @name = strs($n->{names});
            if (($n->{pct_type} // '') eq 'true') {
                my $p = $ctx->{params} || [];
                if (@name == 2 && !grep { lc($_->{name} // '') eq lc $name[0] } @$p) {
                    finding($ctx, $loc, 'unqualified', "$name[0].$name[1]%TYPE: table resolved through search_path");
                }
            } elsif (@name == 1) {
                finding($ctx, $loc, 'unqualified', "type $name[0] resolved through search_path (write pg_catalog.$name[0] or \@extschema@.$name[0])");
            }
        } elsif ($t eq 'AEXPR' && $r1) {
            my @name = strs($n->{name});
            my $kind = join(' ', grep { defined && !ref } @{$n->{_extra} || []}) || 'OP';
            if (@name == 1) {
                my %what = (LIKE => 'LIKE (operator ~~)', ILIKE => 'ILIKE (operator ~~*)', IN => 'IN (...) (operator =)',
                            DISTINCT => 'IS DISTINCT FROM (operator =)', NOT_DISTINCT => 'IS NOT DISTINCT FROM (operator =)',
                            NULLIF => 'NULLIF (operator =)', SIMILAR => 'SIMILAR TO (operator ~)', ANY => "$name[0] ANY", ALL => "$name[0] ALL");
                my $w = $what{(split ' ', $kind)[0]} // ($name[0] eq 'BETWEEN' || $kind =~ /BETWEEN/ ? 'BETWEEN (operators >= and <=)' : "operator $name[0]");
                $w = "$name[0] ANY/ALL" if $kind =~ /ANY|ALL/ && $kind !~ /^(IN|LIKE)/;
                finding($ctx, $loc, 'unqualified', "$w resolved through search_path (write OPERATOR(pg_catalog.$name[0]) or pin search_path)");
            }
        } elsif ($t eq 'TYPECAST' && $r1 && ref $n->{arg} eq 'HASH' && $n->{arg}{_t} eq 'A_CONST'
                 && typename_norm($n->{typeName}) =~ /^reg(class|proc|procedure|type|oper|operator|collation|config|dictionary)$/) {
            # 'name'::regclass looks the name up through search_path when it runs.
            my $v = $n->{arg}{sval} // $n->{arg}{val} // '';
            my $kind = typename_norm($n->{typeName});
            finding($ctx, $n->{arg}{location} // $loc, 'unqualified', "'$v'::$kind looks the name up through search_path (write the schema in the string)")
                if !ref $v && $v !~ /\./;
        } elsif (($t eq 'SUBLINK' || $t eq 'SORTBY') && $r1) {
            # x IN (SELECT ...), x = ANY (SELECT ...); ORDER BY x USING <
            my @name = strs($t eq 'SUBLINK' ? $n->{operName} : $n->{useOp});
            # x IN (SELECT ...) has no operator name: the = it means is looked up so.
            @name = ('=') if $t eq 'SUBLINK' && !@name && ($n->{subLinkType} // '') =~ /^(1|2|3|ALL_SUBLINK|ANY_SUBLINK|ROWCOMPARE_SUBLINK)$/
                && !ref $n->{operName} && 0 == @{[strs($n->{operName})]};
            my $w = $t eq 'SUBLINK' ? 'IN/ANY/ALL (SELECT ...) (operator ' . ($name[0] // '') . ')' : 'ORDER BY ... USING ' . ($name[0] // '');
            finding($ctx, $loc, 'unqualified', "$w resolved through search_path (write OPERATOR(pg_catalog.$name[0]) or pin search_path)") if @name == 1;
        } elsif ($t eq 'CASEEXPR' && $r1 && ref $n->{arg}) {
            finding($ctx, $loc, 'unqualified', "simple CASE x WHEN compares with = resolved through search_path (write CASE WHEN x OPERATOR(pg_catalog.=) ...)");
        } elsif ($t eq 'COLLATECLAUSE' && $r1) {
            my @name = strs($n->{collname});
            finding($ctx, $loc, 'unqualified', "collation \"$name[0]\" resolved through search_path (write pg_catalog.\"$name[0]\")") if @name == 1;
        } elsif ($t eq 'RANGEVAR' && $ctx->{body}) {
            # Pinned or not: pg_temp, last on a pinned path, still holds
            # relations any role can create.
            if (!defined $n->{schemaname} && !$cte{lc($n->{relname} // '')}) {
                finding($ctx, $loc, 'unqualified', "relation $n->{relname} resolved through search_path" . ($r1 ? '' : ' (pg_temp is on it)') . " (write \@extschema@.$n->{relname})");
            }
        }
    });
}

# Rule "untyped": every argument of a call of our function f is a cast to
# the declared parameter type, or a parameter or variable of exactly it.
sub check_args {
    my ($call, $overloads, $ctx, $fname) = @_;
    my @args = @{$call->{args} || []};
    my @cands = grep {
        my $sig = $_;
        my $req = grep { !$_->{def} && $_->{mode} ne 'v' } @$sig;
        @args <= @$sig && @args >= $req || grep { $_->{mode} eq 'v' } @$sig
    } @$overloads;
    @cands = @$overloads unless @cands;
    my $pos = 0;
    for my $a (@args) {
        my (%allowed, $argname);
        my $e = $a;
        if (ref $a eq 'HASH' && $a->{_t} eq 'NAMEDARGEXPR') {
            $argname = lc $a->{name}; $e = $a->{arg};
            for my $sig (@cands) { $allowed{$_->{type}} = 1 for grep { lc($_->{name} // '') eq $argname } @$sig }
        } else {
            for my $sig (@cands) { $allowed{$sig->[$pos]{type}} = 1 if $sig->[$pos] }
        }
        $pos++;
        my $which = defined $argname ? "argument $argname" : "argument $pos";
        my $want = join(' or ', map { "pg_catalog.$_" =~ s/^pg_catalog\.(idem_\w+)/\@extschema@.$1/r } sort keys %allowed) || 'its declared type';
        next unless ref $e eq 'HASH';
        my $got = arg_type($e, $ctx);
        if (!defined $got) {
            my $what = $e->{_t} eq 'A_CONST' ? ((($e->{isnull} // '') eq 'true' || grep { defined && $_ eq 'NULL' } @{$e->{_extra} || []}) ? 'an untyped NULL' : 'an untyped literal') : 'an expression of unstated type';
            finding($ctx, $e->{location} // $call->{location}, 'untyped', "$which of $fname() is $what: cast it to $want");
        } elsif (%allowed && !$allowed{$got} && $got ne '*') {
            finding($ctx, $e->{location} // $call->{location}, 'untyped', "$which of $fname() is of type $got but the parameter is $want");
        }
    }
}

sub arg_type {
    my ($e, $ctx) = @_;
    if ($e->{_t} eq 'TYPECAST') { return typename_norm($e->{typeName}) }
    my $vars = $ctx->{vartypes} || {};
    if ($e->{_t} eq 'COLUMNREF') {
        my @f = strs($e->{fields});
        return $vars->{lc $f[0]} if @f == 1;
        return $vars->{lc $f[1]} if @f == 2 && lc $f[0] eq lc(($ctx->{func} // '') =~ s/.*\.//r);
    }
    if ($e->{_t} eq 'PARAMREF') { return $ctx->{c} ? '*' : $vars->{'$' . $e->{number}} }
    return undef;
}

# ---------------------------------------------------------------- round 2
for my $tl (@toplevel) {
    my ($ctx, $tree) = @$tl;
    # top level: not the function bodies (their strings are not in the tree)
    check_tree($tree, $ctx);
}

my @frags;      # [text, mode, file offset, what, unit]
for my $u (@units) {
    my $ctx = $u->{ctx};
    my %vt;
    my $pn = 0;
    for my $p (@{$ctx->{params}}) {
        $pn++;
        $vt{lc $p->{name}} = $p->{type} if defined $p->{name};
        $vt{'$' . $pn} = $p->{type};
    }
    $ctx->{vartypes} = \%vt;
    if ($u->{kind} eq 'tree') {
        check_tree($u->{tree}, $ctx);
        next;
    }
    my ($body, $off) = body_at($ctx->{file}, $u->{loc});
    next unless defined $body;
    if ($u->{kind} eq 'sql') {
        push @frags, [$body, 0, $off, 'body', $u];
        next;
    }
    my (@f, %decls);
    plpgsql_fragments($body, $ctx, \@f, \%decls);
    $u->{decls} = \%decls;
    my %index;
    for my $f (@f) {
        push @frags, [$f->[0], $f->[1], $off + $f->[2], $f->[3], $u];
        $f->[4] = $#frags;
    }
    while (my ($name, $fi) = each %decls) { $u->{declfrag}{$name} = defined $fi ? $f[$fi][4] : undef }
}

# The SQL a C file prepares or runs: every run of adjacent string literals
# that starts like a statement, unescaped, its printf conversions written
# as identifiers, with a map from each character to the source.  Such SQL
# runs with the caller's search_path; its $n parameters have the types the
# C code declares.  A run the parser refuses (one completed by a macro or
# a %s standing for a keyword) is left out and counted.
for my $file (@cfiles) {
    my $s = $src{$file};
    # A macro between two literals (IDEM_CLAIMABLE_SQL, X("$4")) is written
    # as the identifier xq.
    my $gap = qr{(?:\s|\\\n|/\*.*?\*/|//[^\n]*)*};
    while ($s =~ m{("(?:[^"\\\n]|\\.)*"(?:$gap(?:[A-Z_][A-Z0-9_]*(?:\((?:[^()"]|"(?:[^"\\\n]|\\.)*")*\))?$gap)?"(?:[^"\\\n]|\\.)*")*(?:$gap[A-Z_][A-Z0-9_]*(?:\((?:[^()"]|"(?:[^"\\\n]|\\.)*")*\))?)?)}gs) {
        my ($run, $at) = ($1, $-[1]);
        # Text for pg_stat_activity only, never run.
        next if substr($s, $at > 80 ? $at - 80 : 0, $at > 80 ? 80 : $at) =~ /pgstat_report_activity\([^;]*$/s;
        my ($text, @map) = ('');
        while ($run =~ /\G$gap(?:([A-Z_][A-Z0-9_]*(?:\((?:[^()"]|"(?:[^"\\\n]|\\.)*")*\))?)$gap)?"((?:[^"\\\n]|\\.)*)"/g) {
            my ($macro, $piece, $p) = ($1, $2, $at + $-[2]);
            if (defined $macro) { $text .= ' xq '; push @map, ($at + $-[1]) x 4 }
            for (my $k = 0; $k < length $piece; $k++) {
                my $c = substr($piece, $k, 1);
                my $src_at = $p + $k;
                if ($c eq '\\') {
                    my $e = substr($piece, ++$k, 1);
                    $c = $e eq 'n' ? "\n" : $e eq 't' ? "\t" : $e;
                } elsif ($c eq '%' && substr($piece, $k) =~ /^(%%|%[-0-9.]*(?:l|ll|z|h)?[sdiuxc])/) {
                    my $conv = $1;
                    $k += length($conv) - 1;
                    $c = $conv eq '%%' ? '%' : $conv =~ /s$/ ? 'xq' : '1';
                }
                $text .= $c;
                push @map, ($src_at) x length $c;
            }
        }
        if ($run =~ /"$gap([A-Z_][A-Z0-9_]*)[^"]*$/s) { $text .= ' xq'; push @map, ($at + $-[1]) x 3 }
        next unless $text =~ /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|LOCK|CALL) /;
        my $u = {ctx => {file => $file, base => 0, pinned => 0, body => 1, func => 'C string', params => [],
                         c => 1, map => \@map, vartypes => {}}};
        push @frags, [$text, 0, 0, 'C string', $u];
    }
}

# The same fragment (the portable scripts repeat one another) is parsed
# and read once.
my (%uniq, @ukeys);
my @fkey = map {
    my $key = ($_->[1] < 0 ? 0 : $_->[1]) . "\0" . ($_->[1] < 0 ? 'SELECT' : $_->[0]);
    push @ukeys, $key unless exists $uniq{$key};
    $uniq{$key} //= $#ukeys;
} @frags;
my @ures = parse_batch(map { [(split /\0/, $_, 2)[1, 0]] } @ukeys);
my @utrees = map { $_ =~ /^ERROR: / ? $_ : read_tree($_) } @ures;
my @trees2 = map { $utrees[$_] } @fkey;

# Declared variable types, from their parsed type names.
for my $u (@units) {
    next unless $u->{declfrag};
    while (my ($name, $fi) = each %{$u->{declfrag}}) {
        next unless defined $fi && ref $trees2[$fi];
        my ($tn) = @{$trees2[$fi]};
        $u->{ctx}{vartypes}{$name} = typename_norm($tn) if ref $tn eq 'HASH';
    }
}

for my $k (0 .. $#frags) {
    my ($text, $mode, $off, $what, $u) = @{$frags[$k]};
    my $ctx = {%{$u->{ctx}}, base => $off};
    my $r1 = !$ctx->{pinned};
    if ($mode < 0) {
        if ($what eq 'SIMPLECASE') {
            finding($ctx, 0, 'unqualified', 'simple CASE statement compares with = resolved through search_path (write CASE WHEN x OPERATOR(pg_catalog.=) ...)') if $r1;
        } elsif ($what =~ /^ROWTYPE:(.*)/) {
            finding($ctx, 0, 'unqualified', "$1%ROWTYPE: relation resolved through search_path") if $r1 && $1 !~ /\./;
        } elsif ($what =~ /^TYPE:(.*)/) {
            my @n = split /\./, $1;
            finding($ctx, 0, 'unqualified', "$1%TYPE: table resolved through search_path")
                if $r1 && @n == 2 && !exists $u->{decls}{lc $n[0]} && !exists $ctx->{vartypes}{lc $n[0]};
        } elsif ($what =~ /^COLLATE:(.*)/) {
            finding($ctx, 0, 'unqualified', "collation $1 resolved through search_path") if $r1 && $1 !~ /\./;
        }
        next;
    }
    if (!ref $trees2[$k]) {
        if ($what eq 'C string') { $crefused++; next }
        next if $what eq 'dynamic SQL';
        (my $m = $trees2[$k]) =~ s/^ERROR: //;
        finding($ctx, 0, 'parse', "the raw parser refused this $what: $m");
        next;
    }
    check_tree($trees2[$k], $ctx);
}

print @findings;
my $cstrings = grep { $_->[3] eq 'C string' } @frags;
printf "sqllint: %d file(s), %d function bodies and DO blocks, %d fragments parsed%s: %s\n",
    scalar @files, scalar @units, scalar @frags,
    @cfiles ? sprintf(' (%d SQL strings of C, %d of them not parseable alone and left out)', $cstrings, $crefused) : '',
    @findings ? scalar(@findings) . ' finding(s)' : 'clean';
exit(@findings ? 1 : 0);
