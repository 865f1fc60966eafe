#!/usr/bin/env perl
# generate.pl: the portable edition's SQL, made from the C edition's
# sources (docs/managed.md, "One source").  Used by `make portable` and
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
#   perl sql/portable/generate.pl plain-upgrade|dbdev-upgrade UPGRADE.sql > OUTPUT
#   perl sql/portable/generate.pl dbdev-control > OUTPUT
#
# Upgrades: sql/portable/upgrade/idempotency--A--B.sql, written by hand
# in the form of an extension update script (@extschema@, no C), one per
# release of the portable edition, never edited once released.  `tle`
# registers each with pgtle.install_update_path; `plain-upgrade` wraps one
# for a schema of the plain script (it checks the recorded version is A,
# runs it, records B); `dbdev-upgrade` is the dbdev package's copy.  The
# names must chain: from every B an upgrade (or none) leads on to the
# current version, and no A is older than the first portable release; a
# script listed in sql/portable/upgrade/SHA256SUMS (released) must match.
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
$mode =~ /^(ext|tle|plain|dbdev|plain-upgrade|dbdev-upgrade|dbdev-control)$/
    or fail("usage: generate.pl ext|tle|plain|dbdev SOURCE.sql...  or  plain-upgrade|dbdev-upgrade UPGRADE.sql  or  dbdev-control");
@ARGV or $mode eq 'dbdev-control' or fail("no SOURCE files given");

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

# The upgrade scripts, checked: [from, to, file], in version order.
my @upgrades;
for my $file (sort glob("$here/upgrade/*.sql")) {
    my ($from, $to) = $file =~ m{/idempotency--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$}
        or fail("$file: an upgrade script must be named idempotency--A--B.sql (A, B: major.minor.patch)");
    vcmp($from, $to) < 0 or fail("$file: upgrades to an older or equal version");
    vcmp($from, $first_portable) >= 0 or fail("$file: there is no portable edition $from ($first_portable is the first)");
    vcmp($to, $version) <= 0 or fail("$file: upgrades to $to, newer than default_version $version of idempotency.control");
    push @upgrades, [$from, $to, $file];
}
@upgrades = sort { vcmp($a->[0], $b->[0]) || vcmp($a->[1], $b->[1]) } @upgrades;
# Released upgrades are never edited: sql/portable/upgrade/SHA256SUMS has
# the SHA-256 of each script once its release is out (`sha256sum FILE`
# lines; # comments), and every script listed there must still match.
if (-f "$here/upgrade/SHA256SUMS") {
    require Digest::SHA;
    for my $line (split /\n/, slurp("$here/upgrade/SHA256SUMS")) {
        next if $line =~ /^\s*(#|$)/;
        my ($sum, $name) = $line =~ /^([0-9a-f]{64}) [ *](idempotency--[\d.]+--[\d.]+\.sql)\s*$/
            or fail("sql/portable/upgrade/SHA256SUMS: not a `sha256sum` line: $line");
        -f "$here/upgrade/$name" or fail("sql/portable/upgrade/$name was released (SHA256SUMS) and is missing");
        Digest::SHA->new(256)->addfile("$here/upgrade/$name")->hexdigest eq $sum
            or fail("sql/portable/upgrade/$name was released (SHA256SUMS) and has been edited since: a released upgrade is never edited (write the change into the next release's upgrade)");
    }
}
for my $u (@upgrades) {
    # From its target, the upgrades must lead on to the current version.
    my ($at, %seen) = ($u->[1]);
    while ($at ne $version) {
        my ($next) = grep { $_->[0] eq $at } @upgrades;
        $next && !$seen{$at}++ or fail("$u->[2]: no upgrade leads from $at on to $version (add sql/portable/upgrade/idempotency--$at--...sql)");
        $at = $next->[1];
    }
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
    my ($stmt, $file) = @_;
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
    fail("$file: the $kind script cannot find the schema through pg_extension; teach generate.pl this form:\n$stmt")
        if $stmt =~ /extname\s+OPERATOR\(pg_catalog\.=\)\s+'idempotency'/;
    return $stmt;
}

sub dollar_quote {
    my ($tag, $text) = @_;
    fail("the script contains \$$tag\$, the quote around it") if index($text, "\$$tag\$") >= 0;
    return "\$$tag\$$text\$$tag\$";
}

my $upgrade_head = sub {
    my ($from, $to) = @_;
    return "-- idempotency $from to $to, portable edition: generated by sql/portable/generate.pl from\n"
        . "-- sql/portable/upgrade/idempotency--$from--$to.sql.  Do not edit; see docs/managed.md.\n";
};

# An upgrade script, checked and adapted: [from, to, text].
sub upgrade_script {
    my ($file) = @_;
    my ($from, $to) = $file =~ m{(?:^|/)idempotency--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$}
        or fail("$file: an upgrade script must be named idempotency--A--B.sql");
    my $text = '';
    for my $s (statements(slurp($file), $file)) {
        my ($lead, $stmt) = @$s;
        $lead =~ s/^\\echo.*\n//mg;
        fail("$file: an upgrade script of the portable edition declares no C function:\n$stmt")
            if $stmt =~ /\bLANGUAGE\s+C\b|MODULE_PATHNAME/;
        if ($stmt ne '') {
            $stmt = adapt($stmt, $file);
            $stmt = '' unless defined $stmt;
        }
        $text .= $lead . $stmt;
    }
    return [$from, $to, $text];
}

if ($mode eq 'dbdev-upgrade') {
    my ($from, $to, $text) = @{upgrade_script($ARGV[0])};
    print $upgrade_head->($from, $to), $text;
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
    my ($from, $to, $text) = @{upgrade_script($ARGV[0])};
    my $script_q = dollar_quote('_idem_script_', $text);
    print $upgrade_head->($from, $to);
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
    IF have IS DISTINCT FROM '$from' THEN
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

my (@out, %used, %omitted, %declared);
for my $file (@ARGV) {
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
                push @out, $lead;
                next;
            } else {
                fail("C function $name (symbol $sym, $file) has no portable body (`-- portable: $sym` in sql/portable/*.sql) and is not listed as omit-function in sql/portable/exceptions.txt");
            }
        } elsif ($stmt ne '') {
            my @names = grep { $omitted{$_} } $stmt =~ /\@extschema\@\.(\w+)\s*\(/g;
            if (@names) {
                if ($stmt =~ /^\s*(COMMENT\s+ON\s+FUNCTION|GRANT|REVOKE|CREATE\s+TRIGGER)\b/) {
                    push @out, $lead;
                    next;
                }
                fail("$file: this statement uses $names[0], which the portable edition omits:\n$stmt");
            }
            $stmt = adapt($stmt, $file);
            if (!defined $stmt) {
                push @out, $lead;
                next;
            }
        }
        push @out, $lead . $stmt;
    }
}
for my $sym (sort keys %body) {
    fail("$body_file{$sym}: the body `-- portable: $sym` is used by no C declaration") unless $used{$sym};
}
for my $name (sort keys %fragment) {
    fail("$fragment_file{$name}: the fragment `-- portable-fragment: $name` is used by no body") unless $fragment_used{$name};
}
for my $name (sort keys %omit) {
    fail("exceptions.txt: omit-function $name, but no C function of that name is declared") unless $declared{$name};
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
    my @paths = map { upgrade_script($_->[2]) } @upgrades;
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
        my ($from, $to, $text) = @$p;
        my $pq = dollar_quote('_idem_tle_', $text);
        print <<"EOT";
    IF NOT EXISTS (SELECT FROM pgtle.extension_update_paths('idempotency') AS p
                    WHERE p.source OPERATOR(pg_catalog.=) '$from' AND p.target OPERATOR(pg_catalog.=) '$to'
                      AND p.path OPERATOR(pg_catalog.=) '$from--$to') THEN
        -- sql/portable/upgrade/idempotency--$from--$to.sql
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
