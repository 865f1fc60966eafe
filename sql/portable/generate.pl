#!/usr/bin/env perl
# generate.pl: the portable edition's SQL, made from the C edition's
# sources (docs/managed.md; how it is built: below).  Used by `make portable` and
# `make tle`; needs only perl (core modules) and the files named below.
#
#   perl sql/portable/generate.pl MODE SOURCE.sql...   > OUTPUT
#
# MODE:
#   ext    the extension script (what CREATE EXTENSION runs; @extschema@
#          left for the server to replace)
#   tle    ext, wrapped in pgtle.install_extension(...) for a role in
#          pgtle_admin (build/tle/idempotency--pgtle.sql)
#   plain  ext without what only CREATE EXTENSION allows, wrapped in a DO
#          block that installs into the schema named by the setting
#          idempotency.install_schema (build/portable/...)
#   dbdev  ext that finds its schema without pg_extension (database.dev
#          names the extension HANDLE@idempotency): build/dbdev/
#
#   perl sql/portable/generate.pl upgrade|plain-upgrade|dbdev-upgrade A--B > OUTPUT
#   perl sql/portable/generate.pl upgrade-list      (the A--B pairs, one a line)
#   perl sql/portable/generate.pl dbdev-control > OUTPUT
#   perl sql/portable/generate.pl sum FILE...       (record released scripts)
#   perl sql/portable/generate.pl freeze A--B       (at the release of B)
#   perl sql/portable/generate.pl ext|tle|plain|dbdev sql/released/portable/idempotency--X.sql
#          (a released install script, as frozen, wrapped as MODE: the
#          upgrade tests install the release X this way)
#
# Upgrades are written once, for the C edition: idempotency--A--B.sql
# (sql/ until B is released, then sql/released/).
# For every one with A no older than the first portable release (0.5.0),
# the portable upgrade A--B is that script made portable exactly as `ext`
# makes the install sources (below): a C function's declaration gets its
# portable body (so re-declaring a C function unchanged in the C upgrade
# ships a changed portable body), what `ext` omits is omitted (also a
# DROP or ALTER FUNCTION of an omitted function), every other statement
# is copied.  An optional sql/portable/upgrade/idempotency--A--B.sql (no
# C, @extschema@) is appended: what only the portable edition changes.
# `upgrade` prints the result, `tle` registers each with
# pgtle.install_update_path, `plain-upgrade` wraps one for a schema of the
# plain script (it checks the recorded version is A, runs it, records B),
# `dbdev-upgrade` is the dbdev package's copy.  The pairs must chain: from
# every B an upgrade leads on to default_version.
#
# Released scripts are never edited.  They live in sql/released/: the C
# edition's scripts of released versions (idempotency--X.sql,
# idempotency--A--B.sql) and the frozen portable scripts of
# sql/released/portable/; sql/released/SHA256SUMS has the SHA-256 of each
# (paths from the top of the checkout, as `sha256sum` writes them).  sql/
# holds only the upgrade to default_version, not yet released.  Every mode
# checks them first and fails when one is missing, edited, not listed, or
# a released script is still in sql/.  At the release of B, `generate.pl
# freeze A--B` moves the C upgrade sql/idempotency--A--B.sql into
# sql/released/, writes its generated portable upgrade to
# sql/released/portable/idempotency--A--B.sql and records the sums of
# both; from then on the frozen one is used instead of generating it again
# from later bodies, and a released upgrade not frozen fails the build.
# `sum FILE...` writes (or replaces) the lines of FILEs: for B's install
# script, copied from build/, and after a deliberate in-place fix of a
# released script (sql/portable/upgrade/README.md).
#
# SOURCEs are the C edition's install sources in Makefile order
# (SQL_SOURCES).  Every statement of theirs is copied unchanged, except:
#   - a `CREATE FUNCTION ... AS 'MODULE_PATHNAME', 'SYMBOL' LANGUAGE C`
#     declaration keeps its header (name, arguments, defaults, result,
#     volatility, strictness, parallel label, ROWS) and gets the body of
#     the block `-- portable: SYMBOL` of sql/portable/*.sql instead of
#     its C symbol: `LANGUAGE C` becomes that block's LANGUAGE and the
#     block's `AS $$ ... $$` is appended;
#   - a block may include fragments shared with other blocks: a line
#     `@@NAME@@` is replaced by the text of `-- portable-fragment: NAME`
#     then `FRAGMENT AS $$ ... $$;` in sql/portable/*.sql (fragments may
#     include fragments; an unused or undefined fragment is an error); a
#     fragment whose text has `{{ARG}}` is included as `@@NAME(WORD)@@`,
#     WORD replacing it (the caller's name in the fragment's messages);
#   - a C function without such a block must be named in
#     sql/portable/exceptions.txt (`omit-function NAME reason`); it is
#     left out, with the COMMENT, GRANT, REVOKE and CREATE TRIGGER
#     statements that name it.  Any other statement that names it (a view,
#     a CHECK, a body) is an error, as is a C function neither ported nor
#     listed, a block no declaration uses, and a name both ported and
#     listed.
# Errors go to stderr, with exit status 1: the Makefile then writes nothing.
use strict;
use warnings;
use File::Basename qw(dirname);

my $here = dirname(__FILE__);
my $top = "$here/../..";

sub fail { print STDERR "generate.pl: $_[0]\n"; exit 1; }

my $mode = shift @ARGV // '';
$mode =~ /^(ext|tle|plain|dbdev|upgrade|plain-upgrade|dbdev-upgrade|upgrade-list|dbdev-control|sum|freeze)$/
    or fail("usage: generate.pl ext|tle|plain|dbdev SOURCE.sql...  or  upgrade|plain-upgrade|dbdev-upgrade A--B"
            . "  or  upgrade-list  or  dbdev-control  or  sum FILE...  or  freeze A--B");
@ARGV or $mode =~ /^(dbdev-control|upgrade-list)$/ or fail("no SOURCE files given");

sub slurp {
    my ($file) = @_;
    open(my $fh, '<', $file) or fail("cannot read $file: $!");
    local $/;
    my $text = <$fh>;
    close $fh;
    return $text;
}

# The version and description, from the control file (as the Makefile).
my $control = slurp("$top/idempotency.control");
my ($version) = $control =~ /^default_version\s*=\s*'([^']*)'/m or fail("no default_version in idempotency.control");
my ($comment) = $control =~ /^comment\s*=\s*'([^']*)'/m or fail("no comment in idempotency.control");

# The first release of the portable edition: nothing older is upgraded.
my $first_portable = '0.5.0';
sub vcmp {
    my @a = split /\./, $_[0];
    my @b = split /\./, $_[1];
    for my $i (0 .. 2) { my $c = ($a[$i] // 0) <=> ($b[$i] // 0); return $c if $c; }
    return 0;
}

# Released scripts: sql/released/SHA256SUMS (paths from the top).
my $SUMS = 'sql/released/SHA256SUMS';
sub sha256 { require Digest::SHA; return Digest::SHA->new(256)->addfile($_[0])->hexdigest; }
sub read_sums {
    my %sum;
    return \%sum unless -f "$top/$SUMS";
    for my $line (split /\n/, slurp("$top/$SUMS")) {
        next if $line =~ /^\s*(#|$)/;
        my ($hex, $name) = $line =~ /^([0-9a-f]{64}) [ *](sql\/\S+\.sql)\s*$/
            or fail("$SUMS: not a `sha256sum` line of a sql/ file: $line");
        $sum{$name} = $hex;
    }
    return \%sum;
}

# Record (or replace) the SHA-256 of each file named, a path from the top.
sub record_sums {
    my @lines = -f "$top/$SUMS" ? split(/\n/, slurp("$top/$SUMS")) : ();
    for my $name (@_) {
        $name =~ s{^\./}{};
        $name =~ m{^sql/released/(portable/)?idempotency--[\d.]+(--[\d.]+)?\.sql$}
            or fail("sum: $name is not a released script (sql/released/idempotency--*.sql or sql/released/portable/*.sql, "
                    . "from the top of the checkout; move a script of sql/ there first: git mv $name sql/released/)");
        -f "$top/$name" or fail("sum: no file $name");
        my $line = sha256("$top/$name") . "  $name";
        my $n = grep { / \Q$name\E\s*$/ } @lines;
        @lines = map { / \Q$name\E\s*$/ ? $line : $_ } @lines;
        push @lines, $line unless $n;
        print STDERR "generate.pl: $SUMS: $line\n";
    }
    my @head = grep { /^\s*(#|$)/ } @lines;
    my @body = sort { ($a =~ /  (\S+)/)[0] cmp ($b =~ /  (\S+)/)[0] } grep { !/^\s*(#|$)/ } @lines;
    open(my $fh, '>', "$top/$SUMS.tmp") or fail("cannot write $SUMS: $!");
    print $fh join("\n", @head, @body), "\n";
    close $fh or fail("cannot write $SUMS: $!");
    rename("$top/$SUMS.tmp", "$top/$SUMS") or fail("cannot write $SUMS: $!");
}
if ($mode eq 'sum') {
    record_sums(@ARGV);
    exit 0;
}

# Every listed script must exist and match; every released one be listed.
my $sums = read_sums();
my $sum_hint = "perl sql/portable/generate.pl sum";
for my $name (sort keys %$sums) {
    -f "$top/$name" or fail("$name was released ($SUMS) and is missing");
    sha256("$top/$name") eq $sums->{$name}
        or fail("$name was released ($SUMS) and has been edited since: a released script is never edited; write the change "
                . "into the upgrade to $version.  A deliberate fix in place (a security fix, as PostgreSQL's contrib scripts "
                . "for CVE-2020-14350) then records the new sum: $sum_hint $name");
}
my (@c_upgrades, @c_installs);
for my $file (sort glob("$top/sql/idempotency--*.sql"), sort glob("$top/sql/released/idempotency--*.sql")) {
    (my $name = $file) =~ s{^\Q$top\E/}{};
    my $released = $name =~ m{^sql/released/};
    my $move = "released scripts live in sql/released/: git mv $name sql/released/ && $sum_hint sql/released/"
        . ($name =~ s{.*/}{}r);
    if (my ($from, $to) = $name =~ m{^sql/(?:released/)?idempotency--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$}) {
        vcmp($from, $to) < 0 or fail("$name upgrades to an older or equal version");
        vcmp($to, $version) <= 0 or fail("$name upgrades to $to, newer than default_version $version of idempotency.control");
        push @c_upgrades, [$from, $to, $name];
        $released or vcmp($to, $version) >= 0
            or fail("$name belongs to a released version (default_version is $version): $move");
    } elsif (my ($v) = $name =~ m{^sql/(?:released/)?idempotency--(\d+\.\d+\.\d+)\.sql$}) {
        $released or fail("$name: the install script of default_version is built (build/idempotency--$version.sql); "
                          . "a released one is frozen in sql/released/");
        push @c_installs, $v;
    } else {
        fail("$name: a script must be named idempotency--X.sql or idempotency--A--B.sql (major.minor.patch)");
    }
    !$released or exists $sums->{$name} or fail("$name is released and not in $SUMS: $sum_hint $name");
}
for my $file (sort glob("$top/sql/released/portable/*")) {
    (my $name = $file) =~ s{^\Q$top\E/}{};
    $name =~ m{^sql/released/portable/idempotency--\d+\.\d+\.\d+(--\d+\.\d+\.\d+)?\.sql$}
        or fail("$name: sql/released/portable/ holds only idempotency--X.sql and idempotency--A--B.sql");
    exists $sums->{$name} or fail("$name is frozen but not in $SUMS: $sum_hint $name");
    $mode ne 'freeze' or $name ne "sql/released/portable/idempotency--$ARGV[0].sql"
        or fail("$name is frozen already: a released script is never edited");
}

# The portable upgrades: [from, to, C script, frozen script or undef,
# portable supplement or undef], in version order.
my @upgrades;
for my $u (sort { vcmp($a->[0], $b->[0]) || vcmp($a->[1], $b->[1]) } @c_upgrades) {
    my ($from, $to, $name) = @$u;
    next if vcmp($from, $first_portable) < 0;
    my $frozen = "sql/released/portable/idempotency--$from--$to.sql";
    my $supplement = "sql/portable/upgrade/idempotency--$from--$to.sql";
    if (vcmp($to, $version) < 0 && $mode ne 'freeze') {
        -f "$top/$frozen" or fail("$to is released (default_version is $version) and its portable upgrade is not frozen: "
                                  . "perl sql/portable/generate.pl freeze $from--$to "
                                  . "(from the release's sources, before their bodies change)");
    }
    push @upgrades, [$from, $to, $name, (-f "$top/$frozen" ? $frozen : undef), (-f "$top/$supplement" ? $supplement : undef)];
}
for my $file (sort glob("$here/upgrade/*.sql")) {
    my ($pair) = $file =~ m{/idempotency--(\d+\.\d+\.\d+--\d+\.\d+\.\d+)\.sql$}
        or fail("$file: a supplement must be named idempotency--A--B.sql, after the C edition's upgrade idempotency--A--B.sql");
    grep { "$_->[0]--$_->[1]" eq $pair } @upgrades
        or fail("$file: there is no C edition upgrade idempotency--$pair.sql (from $first_portable on) to supplement");
}
for my $u (@upgrades) {
    # From its target, the upgrades must lead on to the current version.
    my ($at, %seen) = ($u->[1]);
    while ($at ne $version) {
        my ($next) = grep { $_->[0] eq $at } @upgrades;
        $next && !$seen{$at}++ or fail("$u->[2]: no upgrade leads from $at on to $version (add sql/idempotency--$at--...sql)");
        $at = $next->[1];
    }
}
if ($mode eq 'upgrade-list') {
    print "$_->[0]--$_->[1]\n" for @upgrades;
    exit 0;
}

# exceptions.txt: `KIND OBJECT REASON...`; the generator reads the
# omit-function lines (the catalog-parity test reads them all).
my %omit;
for my $line (split /\n/, slurp("$here/exceptions.txt")) {
    next if $line =~ /^\s*(#|$)/;
    my ($kind, $object, $reason) = split ' ', $line, 3;
    defined $reason && $reason =~ /\S/ or fail("exceptions.txt: no reason given in: $line");
    $omit{$object} = $reason if $kind eq 'omit-function';
}

# Split SQL text into statements: [leading comments and blank lines, the
# statement itself].  Aware of -- comments, '...' strings and $tag$ quotes,
# which is all the sources use.
sub statements {
    my ($text, $file) = @_;
    my @out;
    my ($lead, $stmt) = ('', '');
    my $quote;    # undef, "'" or a dollar tag
    for my $line (split /(?<=\n)/, $text) {
        if (!defined $quote && $stmt eq '' && ($line =~ /^\s*(--.*)?\n?$/ || $line =~ /^\\echo/)) {
            $lead .= $line;
            next;
        }
        $stmt .= $line;
        my $rest = $line;
        my $ends = 0;
        while ($rest ne '') {
            if (defined $quote) {
                my $close = $quote eq "'" ? "'" : $quote;
                my $at = index($rest, $close);
                if ($at < 0) { $rest = ''; last; }
                $rest = substr($rest, $at + length $close);
                $quote = undef;
                next;
            }
            if ($rest =~ /^(.*?)(--|'|\$[A-Za-z_]*\$|;)/s) {
                my $tok = $2;
                $rest = substr($rest, length($1) + length($tok));
                if ($tok eq '--') { $rest = ''; last; }
                if ($tok eq ';') { $ends = 1 if $rest =~ /^\s*(--.*)?$/; next; }
                $quote = $tok;
                next;
            }
            last;
        }
        if ($ends && !defined $quote) {
            push @out, [$lead, $stmt];
            ($lead, $stmt) = ('', '');
        }
    }
    fail("$file: unterminated statement at its end:\n$stmt") if $stmt =~ /\S/;
    push @out, [$lead, ''] if $lead ne '';
    return @out;
}

# The portable bodies: `-- portable: SYMBOL` then LANGUAGE x AS $$...$$;
# and the fragments they share: `-- portable-fragment: NAME` then
# FRAGMENT AS $$...$$; whose text replaces every line `@@NAME@@` of a body
# or of another fragment (PL/pgSQL has no helper functions that both
# editions would not list; a fragment is a nested DECLARE ... BEGIN ... END
# block working on the variables its header comment names).
my (%body, %body_file, %fragment, %fragment_file, %fragment_used);
for my $file (sort glob("$here/*.sql")) {
    for my $s (statements(slurp($file), $file)) {
        my ($lead, $stmt) = @$s;
        next if $stmt eq '';
        my @markers = $lead =~ /^-- portable(-fragment)?: (\w+)\s*$/mg;
        @markers == 2 or fail("$file: each statement needs one `-- portable: SYMBOL` or `-- portable-fragment: NAME` line before it:\n$stmt");
        my ($is_fragment, $sym) = @markers;
        if ($is_fragment) {
            fail("$file: two fragments $sym (also in $fragment_file{$sym})") if exists $fragment{$sym};
            $stmt =~ /^\s*FRAGMENT\s+AS\s+(\$[A-Za-z_]*\$)\n?(.*?)\1\s*;\s*(--.*)?$/s
                or fail("$file: the fragment $sym must be `FRAGMENT AS \$\$ ... \$\$;`");
            $fragment{$sym} = $2;
            $fragment_file{$sym} = $file;
            next;
        }
        fail("$file: two bodies for $sym (also in $body_file{$sym})") if exists $body{$sym};
        $stmt =~ /^\s*(LANGUAGE\s+\w+)\s+(AS\s+(\$[A-Za-z_]*\$).*\3)\s*;\s*(--.*)?$/s
            or fail("$file: the block of $sym must be `LANGUAGE name AS \$\$ ... \$\$;`");
        $body{$sym} = [$1, $2];
        $body_file{$sym} = $file;
    }
}

# Expand the @@NAME@@ lines of a text (fragments may use fragments).
my $ARG_MARK = '{{ARG}}';    # in a fragment: the WORD of @@NAME(WORD)@@
sub expand {
    my ($text, $where, $depth) = @_;
    fail("$where: fragments nested more than 8 deep") if $depth > 8;
    $text =~ s{^([ \t]*)\@\@(\w+)(?:\((\w+)\))?\@\@[ \t]*\n}{
        my ($indent, $name, $arg) = ($1, $2, $3);
        fail("$where uses the fragment $name, which sql/portable/*.sql does not define") unless exists $fragment{$name};
        $fragment_used{$name} = 1;
        my $f = expand($fragment{$name}, "fragment $name", $depth + 1);
        if (index($f, $ARG_MARK) >= 0) {
            defined $arg or fail("$where: the fragment $name takes an argument: \@\@$name(WORD)\@\@");
            $f =~ s/\Q$ARG_MARK\E/$arg/g;
        } else {
            defined $arg and fail("$where: the fragment $name takes no argument");
        }
        $f =~ s/^(?=.)/$indent/mg;
        $f;
    }gme;
    fail("$where: \@\@NAME\@\@ must stand alone on its line") if $text =~ /\@\@\w+(\(\w+\))?\@\@/;
    return $text;
}
for my $sym (keys %body) {
    $body{$sym}[1] = expand($body{$sym}[1], "the body of $sym", 0);
}

# What the plain script and the dbdev package change in a statement of
# the extension script (or of an upgrade script): undef leaves it out.
sub adapt {
    my ($stmt, $file, $is_frozen) = @_;
    my $kind = $mode =~ /^plain/ ? 'plain' : $mode =~ /^dbdev/ ? 'dbdev' : 'ext';
    return $stmt if $kind eq 'ext';
    if ($kind eq 'plain') {
        # Only CREATE EXTENSION may call it; and there is no extension to alter.
        return undef if $stmt =~ /^\s*SELECT\s+pg_catalog\.pg_extension_config_dump\(/;
        return undef if $stmt =~ /^\s*ALTER\s+EXTENSION\b/i;
    }
    # Without CREATE EXTENSION (plain), or with an extension named
    # HANDLE@idempotency (dbdev), there is no pg_extension row named
    # idempotency to find the schema by: the functions name it (as every
    # portable body does), so it cannot be renamed.
    $stmt =~ s/\(SELECT n\.nspname FROM pg_catalog\.pg_extension e\s+JOIN pg_catalog\.pg_namespace n ON n\.oid OPERATOR\(pg_catalog\.=\) e\.extnamespace\s+WHERE e\.extname OPERATOR\(pg_catalog\.=\) 'idempotency'\)/(SELECT n.nspname FROM pg_catalog.pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) \$nsp\$\@extschema\@\$nsp\$::pg_catalog.regnamespace)/g;
    # (A frozen script has the portable bodies in it, which find their
    # schema by @extschema@ and were not adapted when it was generated;
    # only their statements may still name the extension, as ext left them.)
    fail("$file: the $kind script cannot find the schema through pg_extension; teach generate.pl this form:\n$stmt")
        if !$is_frozen && $stmt =~ /extname\s+OPERATOR\(pg_catalog\.=\)\s+'idempotency'/;
    return $stmt;
}

sub dollar_quote {
    my ($tag, $text) = @_;
    fail("the script contains \$$tag\$, the quote around it") if index($text, "\$$tag\$") >= 0;
    return "\$$tag\$$text\$$tag\$";
}

# Port the statements of a C edition script (an install source or an
# upgrade) as described at the top, appending them to @$out.
my (%used, %omitted, %declared);
sub port {
    my ($file, $out, $is_upgrade) = @_;
    for my $s (statements(slurp($file), $file)) {
        my ($lead, $stmt) = @$s;
        $lead =~ s/^\\echo.*\n//mg;
        my ($cname) = $stmt =~ /^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+\@extschema\@\.(\w+)/;
        if (defined $cname && $stmt =~ /\bLANGUAGE\s+C\b/) {
            my $name = $cname;
            my ($sym) = $stmt =~ /AS\s+'MODULE_PATHNAME'\s*,\s*'(\w+)'/
                or fail("$file: C function $name without AS 'MODULE_PATHNAME', 'symbol'");
            $declared{$name} = 1;
            if (exists $body{$sym}) {
                fail("$name is ported (sql/portable: $sym) and listed as omit-function in exceptions.txt") if exists $omit{$name};
                my ($lang, $as) = @{$body{$sym}};
                $stmt =~ s/\n?[ \t]*AS\s+'MODULE_PATHNAME'\s*,\s*'\w+'[ \t]*//;
                $stmt =~ s/\bLANGUAGE\s+C\b/$lang/;
                $stmt =~ s/;(\s*)$/\n$as;$1/;
                $used{$sym} = 1;
            } elsif (exists $omit{$name}) {
                $omitted{$name} = 1;
                push @$out, $lead;
                next;
            } else {
                fail("C function $name (symbol $sym, $file) has no portable body (`-- portable: $sym` in sql/portable/*.sql) and is not listed as omit-function in sql/portable/exceptions.txt");
            }
        } elsif ($stmt ne '') {
            # An upgrade may name a function the install sources declared.
            my @names = grep { $omitted{$_} || ($is_upgrade && exists $omit{$_}) } $stmt =~ /\@extschema\@\.(\w+)\s*\(/g;
            if (@names) {
                if ($stmt =~ /^\s*(COMMENT\s+ON\s+FUNCTION|GRANT|REVOKE|CREATE\s+TRIGGER)\b/
                    || ($is_upgrade && $stmt =~ /^\s*(DROP|ALTER)\s+FUNCTION\b/)) {
                    push @$out, $lead;
                    next;
                }
                fail("$file: this statement uses $names[0], which the portable edition omits:\n$stmt");
            }
            $stmt = adapt($stmt, $file);
            if (!defined $stmt) {
                push @$out, $lead;
                next;
            }
        }
        push @$out, $lead . $stmt;
    }
}

# A script of the portable edition as generated earlier (frozen), its
# head taken off, adapted to the mode.
sub frozen {
    my ($file) = @_;
    my $text = slurp($file);
    $text =~ s/\A(--[^\n]*\n){2}// if $text =~ /\A-- idempotency /;
    my @out;
    for my $s (statements($text, $file)) {
        my ($lead, $stmt) = @$s;
        $stmt = adapt($stmt, $file, 1) if $stmt ne '';
        push @out, $lead . ($stmt // '');
    }
    return join('', @out);
}

my $upgrade_head = sub {
    my ($u) = @_;
    my ($from, $to, $c, $frozen, $supplement) = @$u;
    my $src = $frozen ? "$frozen (frozen at the release of $to)" : $c . ($supplement ? " and $supplement" : '');
    return "-- idempotency $from to $to, portable edition: generated by sql/portable/generate.pl from\n"
        . "-- $src.  Do not edit; see docs/managed.md.\n";
};

# A portable upgrade, adapted to the mode: [from, to, text].
sub upgrade_script {
    my ($u) = @_;
    my ($from, $to, $c, $frozen, $supplement) = @$u;
    return [$from, $to, frozen("$top/$frozen")] if $frozen;
    my @out;
    port("$top/$c", \@out, 1);
    if ($supplement) {
        push @out, "\n-- $supplement (the portable edition only)\n";
        for my $s (statements(slurp("$top/$supplement"), $supplement)) {
            my ($lead, $stmt) = @$s;
            $lead =~ s/^\\echo.*\n//mg;
            fail("$supplement: a portable supplement declares no C function:\n$stmt")
                if $stmt =~ /\bLANGUAGE\s+C\b|MODULE_PATHNAME/;
            $stmt = adapt($stmt, $supplement) if $stmt ne '';
            push @out, $lead . ($stmt // '');
        }
    }
    my $text = join('', @out);
    fail("$c: MODULE_PATHNAME is left in the portable upgrade") if $text =~ /MODULE_PATHNAME/;
    fail("$c: LANGUAGE C is left in the portable upgrade") if $text =~ /\bLANGUAGE\s+C\b/;
    return [$from, $to, $text];
}
sub upgrade_named {
    my ($pair) = @_;
    my ($u) = grep { "$_->[0]--$_->[1]" eq ($pair // '') } @upgrades
        or fail("no upgrade " . ($pair // '') . " of the portable edition; these are: " . join(' ', map { "$_->[0]--$_->[1]" } @upgrades));
    return $u;
}

if ($mode eq 'upgrade' || $mode eq 'dbdev-upgrade') {
    my $u = upgrade_named($ARGV[0]);
    print $upgrade_head->($u), upgrade_script($u)->[2];
    exit 0;
}

if ($mode eq 'freeze') {
    # At a release B: its portable upgrade A--B, as generated now, into
    # sql/released/portable/, the C script moved into sql/released/, and
    # the sums of both.
    my $u = upgrade_named($ARGV[0]);
    my $frozen = "sql/released/portable/idempotency--$ARGV[0].sql";
    open(my $fh, '>', "$top/$frozen.tmp") or fail("cannot write $frozen: $!");
    print $fh $upgrade_head->($u), upgrade_script($u)->[2];
    close $fh or fail("cannot write $frozen: $!");
    rename("$top/$frozen.tmp", "$top/$frozen") or fail("cannot write $frozen: $!");
    my $c_released = "sql/released/idempotency--$ARGV[0].sql";
    if ($u->[2] ne $c_released) {
        rename("$top/$u->[2]", "$top/$c_released") or fail("cannot move $u->[2] to $c_released: $!");
        print STDERR "generate.pl: moved $u->[2] to $c_released\n";
    }
    record_sums($c_released, $frozen);
    exit 0;
}

if ($mode eq 'dbdev-control') {
    (my $desc = $comment) =~ s/'/''/g;
    print <<"EOT";
# idempotency, portable edition (SQL and PL/pgSQL) for database.dev:
# generated by sql/portable/generate.pl (make dbdev); see docs/managed.md.
comment = '$desc'
default_version = '$version'
relocatable = false
superuser = false
trusted = true
EOT
    exit 0;
}

if ($mode eq 'plain-upgrade') {
    my $u = upgrade_named($ARGV[0]);
    my ($from, $to, $text) = @{upgrade_script($u)};
    my $script_q = dollar_quote('_idem_script_', $text);
    print $upgrade_head->($u);
    print <<"EOT";
--
-- Upgrades the plain script's objects in the schema named by the setting
-- idempotency.install_schema from version $from to $to: it checks that
-- the schema's idem_portable_version records $from, runs the upgrade and
-- records $to, in one DO statement (all or nothing).  For example:
--   PGOPTIONS='-c idempotency.install_schema=idem' psql -v ON_ERROR_STOP=1 -f THIS_FILE
-- or, from a migration tool, two statements in one session:
--   SET idempotency.install_schema = 'idem';  and this file's text.
DO \$_idem_upgrade_\$
DECLARE
    target pg_catalog.text := pg_catalog.current_setting('idempotency.install_schema', true);
    have pg_catalog.text;
BEGIN
    IF target IS NULL OR target OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'idempotency: no schema named to upgrade'
            USING ERRCODE = '22023',
                  HINT = 'Set idempotency.install_schema first, e.g. SET idempotency.install_schema = ''idem''; or PGOPTIONS=''-c idempotency.install_schema=idem'' for psql.';
    END IF;
    IF pg_catalog.to_regclass(pg_catalog.format('%I.idem_portable_version', target)) IS NULL THEN
        RAISE EXCEPTION 'idempotency: schema "%" has no idempotency objects installed by the plain script', target
            USING ERRCODE = '42P01',
                  HINT = 'Install with idempotency-portable--VERSION.sql; a schema of CREATE EXTENSION is upgraded with ALTER EXTENSION idempotency UPDATE.';
    END IF;
    EXECUTE pg_catalog.format('LOCK TABLE %I.idem_portable_version IN EXCLUSIVE MODE', target);
    EXECUTE pg_catalog.format('SELECT pg_catalog.max(version) FROM %I.idem_portable_version', target) INTO have;
    IF have IS NULL OR have OPERATOR(pg_catalog.<>) '$from' THEN
        RAISE EXCEPTION 'idempotency: schema "%" has version %, and this script upgrades version $from to $to', target, COALESCE(have, 'none')
            USING ERRCODE = '55000',
                  HINT = CASE WHEN have OPERATOR(pg_catalog.=) '$to' THEN 'The schema has version $to already: nothing to do.'
                              ELSE 'Run the upgrade scripts idempotency-portable--A--B.sql from its version on, in order.' END;
    END IF;
    EXECUTE pg_catalog.replace(
EOT
    print "        ", $script_q, ",\n";
    print <<"EOT";
        '\@extschema\@', pg_catalog.quote_ident(target));
    EXECUTE pg_catalog.format(
        'UPDATE %I.idem_portable_version SET version = %L, installed_at = pg_catalog.now()', target, '$to');
END
\$_idem_upgrade_\$;
EOT
    exit 0;
}

# The install script: the C edition's sources, or a frozen release's.
my @out;
if (@ARGV == 1 && $ARGV[0] =~ m{(?:^|/)sql/released/portable/idempotency--(\d+\.\d+\.\d+)\.sql$}) {
    $version = $1;
    @upgrades = grep { vcmp($_->[1], $version) <= 0 } @upgrades;
    push @out, frozen($ARGV[0]);
} else {
    port($_, \@out, 0) for @ARGV;
    for my $sym (sort keys %body) {
        fail("$body_file{$sym}: the body `-- portable: $sym` is used by no C declaration") unless $used{$sym};
    }
    for my $name (sort keys %fragment) {
        fail("$fragment_file{$name}: the fragment `-- portable-fragment: $name` is used by no body") unless $fragment_used{$name};
    }
    for my $name (sort keys %omit) {
        fail("exceptions.txt: omit-function $name, but no C function of that name is declared") unless $declared{$name};
    }
}
my $script = join('', @out);
fail("MODULE_PATHNAME is left in the portable script") if $script =~ /MODULE_PATHNAME/;
fail("LANGUAGE C is left in the portable script") if $script =~ /\bLANGUAGE\s+C\b/;

my $head = "-- idempotency $version, portable edition (SQL and PL/pgSQL): generated by sql/portable/generate.pl\n"
    . "-- from the C edition's sources and sql/portable/*.sql.  Do not edit; see docs/managed.md.\n";

if ($mode eq 'ext' || $mode eq 'dbdev') {
    print $head, $script;
    exit 0;
}

if ($mode eq 'tle') {
    (my $desc = $comment) =~ s/'/''/g;
    my @paths = map { [@{upgrade_script($_)}, $_->[3] // $_->[2]] } @upgrades;
    print $head;
    my $n = @paths;
    my $listing = $n ? join('', map { "--   $_->[0] to $_->[1]\n" } @paths) : "--   none yet ($version is the first portable release)\n";
    print <<"EOT";
--
-- pg_tle registration (AWS RDS and Aurora, Supabase, any server with pg_tle):
-- run this file as a role in pgtle_admin, in each database that will
-- use the extension, after CREATE EXTENSION pg_tle.  It registers
-- version $version with pgtle.install_extension (or, where an earlier
-- release is registered, adds $version with
-- pgtle.install_extension_version_sql and makes it the default), and
-- every upgrade path not registered yet with pgtle.install_update_path:
$listing-- all in one DO statement (all or nothing).  Then
--   CREATE EXTENSION idempotency;            -- or ... SCHEMA idem
--   ALTER EXTENSION idempotency UPDATE;      -- where an earlier release runs
-- Run again, it registers nothing new (a notice says so).  To replace a
-- registration of the same version:
--   SELECT pgtle.uninstall_extension('idempotency');   (drop the extension first)
DO \$_idem_tle_register_\$
DECLARE
    -- the extension script of version $version
    script pg_catalog.text :=
EOT
    my $q = dollar_quote('_idem_tle_', $script);
    chomp(my $qq = $q);
    print "$qq;\n";
    print <<"EOT";
BEGIN
    -- Without pg_tle, say so (rather than: schema "pgtle" does not exist).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension AS x
                    WHERE x.extname OPERATOR(pg_catalog.=) 'pg_tle'::pg_catalog.name) THEN
        RAISE EXCEPTION 'idempotency: pg_tle is not installed in this database'
            USING ERRCODE = '42704',
                  DETAIL = 'This file registers idempotency $version with pg_tle (pgtle.install_extension), which this database does not have.',
                  HINT = 'Add pg_tle to shared_preload_libraries (on RDS and Aurora: the DB parameter group, then reboot), run CREATE EXTENSION pg_tle; in this database, and run this file again as a role granted pgtle_admin. Without pg_tle, install the plain script idempotency-portable--$version.sql instead (docs/managed.md).';
    END IF;
    IF NOT EXISTS (SELECT FROM pgtle.available_extensions() AS e
                    WHERE e.name OPERATOR(pg_catalog.=) 'idempotency') THEN
        PERFORM pgtle.install_extension('idempotency', '$version',
            '$desc', script);
    ELSIF EXISTS (SELECT FROM pgtle.available_extension_versions() AS v
                   WHERE v.name OPERATOR(pg_catalog.=) 'idempotency'
                     AND v.version OPERATOR(pg_catalog.=) '$version') THEN
        -- Run again: nothing to register (the upgrade paths below still are).
        RAISE NOTICE 'idempotency: version $version is registered already'
            USING HINT = 'To register another build of it: DROP EXTENSION idempotency; SELECT pgtle.uninstall_extension(''idempotency''); then run this file.';
    ELSIF EXISTS (SELECT FROM pgtle.available_extension_versions() AS v
                   WHERE v.name OPERATOR(pg_catalog.=) 'idempotency'
                     AND pg_catalog.string_to_array(v.version, '.')::pg_catalog.int4[]
                         OPERATOR(pg_catalog.>) pg_catalog.string_to_array('$version', '.')::pg_catalog.int4[]) THEN
        RAISE EXCEPTION 'idempotency: a newer version than $version is registered already'
            USING ERRCODE = '55000',
                  HINT = 'Run the file of the newest release; to go back, SELECT pgtle.uninstall_extension(''idempotency''); first.';
    ELSE
        -- An earlier release is registered: add this version.
        PERFORM pgtle.install_extension_version_sql('idempotency', '$version', script);
        PERFORM pgtle.set_default_version('idempotency', '$version');
    END IF;
EOT
    for my $p (@paths) {
        my ($from, $to, $text, $src) = @$p;
        my $pq = dollar_quote('_idem_tle_', $text);
        print <<"EOT";
    IF NOT EXISTS (SELECT FROM pgtle.extension_update_paths('idempotency') AS p
                    WHERE p.source OPERATOR(pg_catalog.=) '$from' AND p.target OPERATOR(pg_catalog.=) '$to'
                      AND p.path OPERATOR(pg_catalog.=) '$from--$to') THEN
        -- from $src
        PERFORM pgtle.install_update_path('idempotency', '$from', '$to',
            $pq);
    END IF;
EOT
    }
    print "END\n\$_idem_tle_register_\$;\n";
    exit 0;
}

# plain
my $script_q = dollar_quote('_idem_script_', $script);
print $head;
print <<"EOT";
--
-- The plain script, for servers without pg_tle (Cloud SQL, Azure, Neon...):
-- installs the objects of the extension into the schema named by the
-- setting idempotency.install_schema (created when missing) and records
-- the version in its table idem_portable_version.  Everything runs in one
-- DO statement, so it installs completely or not at all.  For example:
--   PGOPTIONS='-c idempotency.install_schema=idem' psql -v ON_ERROR_STOP=1 -f THIS_FILE
-- or, from a migration tool, two statements in one session:
--   SET idempotency.install_schema = 'idem';  and this file's text.
DO \$_idem_install_\$
DECLARE
    target pg_catalog.text := pg_catalog.current_setting('idempotency.install_schema', true);
BEGIN
    IF target IS NULL OR target OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'idempotency: no schema named to install into'
            USING ERRCODE = '22023',
                  HINT = 'Set idempotency.install_schema first, e.g. SET idempotency.install_schema = ''idem''; or PGOPTIONS=''-c idempotency.install_schema=idem'' for psql.';
    END IF;
    IF pg_catalog.to_regclass(pg_catalog.format('%I.idem_records', target)) IS NOT NULL THEN
        RAISE EXCEPTION 'idempotency: schema "%" has the idempotency objects already', target
            USING ERRCODE = '42710',
                  HINT = 'Read its version in idem_portable_version and run the upgrade scripts from there.';
    END IF;
    IF pg_catalog.to_regnamespace(pg_catalog.quote_ident(target)) IS NULL THEN
        EXECUTE pg_catalog.format('CREATE SCHEMA %I', target);
    END IF;
    EXECUTE pg_catalog.replace(
EOT
print "        ", $script_q, ",\n";
print <<"EOT";
        '\@extschema\@', pg_catalog.quote_ident(target));
    EXECUTE pg_catalog.format(
        'CREATE TABLE %I.idem_portable_version ('
        ' version pg_catalog.text NOT NULL, edition pg_catalog.text NOT NULL,'
        ' installed_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now())', target);
    EXECUTE pg_catalog.format(
        'COMMENT ON TABLE %I.idem_portable_version IS %L', target,
        'Version of the idempotency objects installed by the plain script (portable edition); one row');
    EXECUTE pg_catalog.format(
        'INSERT INTO %I.idem_portable_version (version, edition) VALUES (%L, %L)',
        target, '$version', 'portable');
END
\$_idem_install_\$;
EOT
