#!/usr/bin/env bash
# Install Citus for the scale-out TAP tests (test/t/*citus*.pl: 020_citus.pl
# to 025_citus_purge.pl).
#
# When citus.so is missing from PG_CONFIG's pkglibdir (default: Debian's
# PostgreSQL 15, /usr/lib/postgresql/15/bin/pg_config; or a source build of
# 16 or 17, /var/cache/idempotency/pgNN/bin/pg_config; Citus 13.2.2 supports
# PostgreSQL 15-17 only) and the source snapshot ../shared/citus (beside the
# checkout) exists, this installs Citus's Debian build dependencies (after
# apt-get update, as root; it says which) and builds and installs Citus with
# ../shared/citus/build.sh (about 5 minutes on 2 cores).  Otherwise it says
# what is missing and exits 0: the TAP tests then skip ("citus not
# installed").  The test harness copies PostgreSQL's lib directory into its
# private installation at each run, so a citus.so installed here is seen by
# the tests.
#
# Usage: [PG_CONFIG=...] bash test/scripts/citus.sh
# (CI: test/scripts/matrix.sh calls it for each major of MATRIX_CITUS, with that
# major's PG_CONFIG, before the major's suites.)
set -u
. "$(dirname "$0")/harness.sh"

PGC=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
SRC=${CITUS_SRC:-$IDEM_TOP/../shared/citus}
# The list in the header of build.sh.
CITUS_BUILD_PACKAGES="build-essential libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libssl-dev
libselinux1-dev libxslt1-dev libpam0g-dev libreadline-dev zlib1g-dev"

if [ ! -x "$PGC" ]; then
    echo "citus: not built: no pg_config at $PGC (set PG_CONFIG)"
    exit 0
fi
major=$("$PGC" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
libdir=$("$PGC" --pkglibdir)
if [ -f "$libdir/citus.so" ]; then
    echo "citus: installed already: $libdir/citus.so"
    exit 0
fi
if [ "$major" -lt 15 ] || [ "$major" -gt 17 ]; then
    echo "citus: not built: Citus 13.2.2 supports PostgreSQL 15-17, $PGC is $major"
    exit 0
fi
if [ ! -f "$SRC/build.sh" ] || [ ! -f "$SRC/citus-13.2.2.tar.xz" ]; then
    echo "citus: not built: no Citus source snapshot at $SRC (build.sh, citus-13.2.2.tar.xz)"
    exit 0
fi
if [ ! -f "$("$PGC" --pgxs)" ]; then
    echo "citus: not built: $PGC has no PGXS (install postgresql-server-dev-$major)"
    exit 0
fi

# shellcheck disable=SC2086
missing=$(idem_missing_packages $CITUS_BUILD_PACKAGES)
if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "citus: not built: missing Debian packages: $missing (run as root, or install them)"
        exit 0
    fi
    echo "citus: apt-get update, then installing the build dependencies: $missing"
    # shellcheck disable=SC2086
    idem_install_packages $missing
fi
if [ ! -w "$libdir" ]; then
    echo "citus: not built: $libdir is not writable (run as root)"
    exit 0
fi

echo "citus: building Citus 13.2.2 into $libdir (about 5 minutes)"
t0=$(date +%s)
PG_CONFIG="$PGC" bash "$SRC/build.sh" || idem_die "the Citus build failed"
[ -f "$libdir/citus.so" ] || idem_die "the Citus build did not install $libdir/citus.so"
echo "citus: built and installed in $(( $(date +%s) - t0 )) s"
