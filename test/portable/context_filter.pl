#!/usr/bin/env perl
# context_filter.pl: pg_regress's --launcher for runs against the portable
# edition (test/scripts/portable.sh).  Runs the psql command line it is given, with
# stderr joined to stdout as pg_regress does, and removes from the output
# the one CONTEXT line that PL/pgSQL adds to an error its RAISE statement
# raised in a function of the extension:
#     CONTEXT:  PL/pgSQL function idem_claim(text,text,interval,text) line 12 at RAISE
# (a function written in C adds none; listed as "behaviour context" in
# sql/portable/exceptions.txt).  When the error passed through other
# functions of the test, their context lines follow: the first of them then
# gets the "CONTEXT:  " prefix, as the C edition prints it.  Nothing else is
# changed; errors from the SQL the portable functions run keep their context
# (and so make a test fail, as they should).
use strict;
use warnings;

my $pid = open(my $out, '-|') // die "fork: $!";
if ($pid == 0) {
    open(STDERR, '>&', \*STDOUT) or die "dup: $!";
    exec(@ARGV) or die "exec $ARGV[0]: $!";
}
my $promote = 0;
while (my $line = <$out>) {
    if ($line =~ /^CONTEXT:  PL\/pgSQL function (?:[\w"]+\.)?idem_\w+\([^)]*\) line \d+ at RAISE$/) {
        $promote = 1;
        next;
    }
    if ($promote && $line =~ /^(SQL statement "|PL\/pgSQL function |SQL function )/) {
        $line = "CONTEXT:  $line";
    }
    $promote = 0;
    print $line;
}
close($out);
exit($? >> 8);
