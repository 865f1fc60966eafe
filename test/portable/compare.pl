#!/usr/bin/env perl
# compare.pl C_CATALOG OTHER_CATALOG EXCEPTIONS EDITION
# The catalog-parity check of test/scripts/portable.sh: the lines of
# test/portable/catalog.sql for the C edition and for the portable
# EDITION (tle or plain) must agree, object by object, but for what
# sql/portable/exceptions.txt lists:
#   omit-function NAME     every function NAME(...) may be absent from EDITION
#   catalog OBJECT         OBJECT may differ (or be absent) in every edition
#   catalog-plain OBJECT   OBJECT may differ (or be absent) in the plain script
# A listed OBJECT that does not differ is an error too (the list must stay
# true).  Prints each difference; exits 1 when any is unlisted.
use strict;
use warnings;

my ($cfile, $ofile, $exc, $edition) = @ARGV;
die "usage: compare.pl C OTHER EXCEPTIONS tle|plain\n" unless defined $edition;

my (%omit, %listed);
open(my $e, '<', $exc) or die "$exc: $!";
while (<$e>) {
    next if /^\s*(#|$)/;
    my ($kind, $object) = split ' ';
    $omit{$object} = 1 if $kind eq 'omit-function';
    $listed{$object} = 1 if $kind eq 'catalog' || ($kind eq 'catalog-plain' && $edition eq 'plain');
}

sub load {
    my ($file) = @_;
    my %h;
    open(my $f, '<', $file) or die "$file: $!";
    while (<$f>) {
        chomp;
        my ($o, $a) = split /\t/, $_, 2;
        die "$file: object $o twice\n" if exists $h{$o};
        $h{$o} = $a // '';
    }
    return %h;
}
my %c = load($cfile);
my %p = load($ofile);
die "$cfile is empty\n" unless %c;

my ($bad, $same, %used) = (0, 0);
my %all = (%c, %p);
for my $o (sort keys %all) {
    my ($ca, $pa) = ($c{$o}, $p{$o});
    if (defined $ca && defined $pa && $ca eq $pa) {
        $same++;
        next;
    }
    my ($fn) = $o =~ /^function:(\w+)\(/;
    if ($listed{$o}) {
        $used{$o} = 1;
        next;
    }
    next if defined $fn && $omit{$fn} && !defined $pa;
    $bad++;
    print "$edition: $o differs from the C edition, and sql/portable/exceptions.txt does not list it\n";
    print "    C:      ", $ca // '(absent)', "\n";
    print "    $edition: ", $pa // '(absent)', "\n";
}
for my $o (sort keys %listed) {
    next if $used{$o};
    $bad++;
    print "$edition: sql/portable/exceptions.txt lists $o, which does not differ: remove the line\n";
}
printf "%s: %d objects identical to the C edition's, %d listed differences, %d unlisted\n",
    $edition, $same, scalar(keys %used), $bad;
exit($bad ? 1 : 0);
