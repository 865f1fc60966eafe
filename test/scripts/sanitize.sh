#!/usr/bin/env bash
# `make sanitize` (not part of `make test`): the whole regression suite
# (pg_regress and isolation, and optionally TAP tests) against the
# extension built with UndefinedBehaviorSanitizer, inside a server that
# runs under Valgrind (memcheck).
#
# How it works, and why this way:
#   - The extension is built with -g -fsanitize=undefined from a copy of
#     the checkout and installed (make install DESTDIR=...) into a private
#     copy of the PostgreSQL installation: the binaries are copied,
#     everything else is linked.  PostgreSQL finds its share and lib
#     directories relative to its binaries, so the private server loads
#     the sanitized library while the system installation, which other
#     test runs on this machine use, is never touched.
#   - The postmaster runs under valgrind --tool=memcheck; every backend is
#     forked from it and so runs under memcheck too.  Memcheck sees reads
#     of uninitialised memory (malloc'd blocks start undefined, and so does
#     every palloc chunk carved from them until written), invalid reads and
#     writes outside malloc'd blocks (large allocations have their own),
#     use of freed blocks, and bad system call arguments.  Debian's server
#     is not built with Valgrind support, so an overrun of a small palloc
#     chunk into its neighbour stays invisible.  UBSan checks every
#     undefined operation in the extension's own code (signed overflow,
#     shifts, bad casts, misaligned access, out-of-bounds array indexes,
#     ...).
#   - Only errors whose stack includes the extension's code are counted:
#     the server itself has known, harmless reports (uninitialised padding
#     written to files).  Any such error, any UBSan report, and any
#     failing test fails the run.
#   - Why not AddressSanitizer: with libasan preloaded into Debian's
#     postgres binary (required, as the server is not instrumented), the
#     server deadlocks before main() gets anywhere: bindtextdomain() waits
#     forever on glibc's _nl_state_lock (seen with both gcc's and clang's
#     runtime; "postgres -V" is enough to see it).
#   - The first backend is checked to really run under memcheck with the
#     sanitized library mapped, so a silently unchecked run cannot pass.
#
# Environment:
#   SANITIZE_REGRESS="claim_basic ..."       only these regression tests
#   SANITIZE_ISOLATION=0                     skip the isolation suite
#   SANITIZE_TAP="test/t/012_model.pl ..."   also run these TAP tests
#                                            (their servers under memcheck)
#   VALGRIND_OPTS="..."                      more valgrind options, e.g.
#                                            --track-origins=yes
#   KEEP_WORK=1                              keep the work directory
# As root it installs what is missing (valgrind, gcc's libubsan);
# otherwise it says what to install.  Expect it to take several minutes.
set -u
. "$(dirname "$0")/harness.sh"

idem_setup gcc libubsan1 valgrind

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-sanitize.XXXXXX") && chmod 755 "$WORK"
idem_work_trap

sys_bindir=$IDEM_BINDIR
sys_libdir=$("$IDEM_PG_CONFIG" --pkglibdir)
sys_sharedir=$("$IDEM_PG_CONFIG" --sharedir)

# 1. A private PostgreSQL installation under $WORK/pg (same layout).
idem_log "private installation in $WORK/pg"
PRIV=$WORK/pg
mkdir -p "$PRIV$sys_libdir" "$PRIV$sys_sharedir/extension" "$(dirname "$PRIV$sys_bindir")"
cp -a "$sys_bindir" "$PRIV$sys_bindir"
for f in "$sys_libdir"/*; do
    case $(basename "$f") in idempotency*|bitcode) ;; *) ln -s "$f" "$PRIV$sys_libdir/" ;; esac
done
for f in "$sys_sharedir"/*; do
    [ "$(basename "$f")" = extension ] || ln -s "$f" "$PRIV$sys_sharedir/"
done
for f in "$sys_sharedir"/extension/*; do
    case $(basename "$f") in idempotency*) ;; *) ln -s "$f" "$PRIV$sys_sharedir/extension/" ;; esac
done

# 2. The sanitized build, from a copy of the checkout.
idem_log "building with -g -fsanitize=undefined"
mkdir -p "$WORK/build"
(cd "$IDEM_TOP" && tar cf - --exclude=.git --exclude='*.o' --exclude='*.bc' --exclude='*.so' \
    --exclude=node_modules Makefile idempotency.control sql src) | (cd "$WORK/build" && tar xf -)
SAN_FLAGS="-g -O1 -fno-omit-frame-pointer -fsanitize=undefined -fno-sanitize=vptr"
make -C "$WORK/build" -s PG_CONFIG="$IDEM_PG_CONFIG" CC=gcc with_llvm=no COPT="$SAN_FLAGS" \
    >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; idem_die "sanitized build failed"; }
make -C "$WORK/build" -s PG_CONFIG="$IDEM_PG_CONFIG" CC=gcc with_llvm=no COPT="$SAN_FLAGS" \
    DESTDIR="$PRIV" install >>"$WORK/build.log" 2>&1 \
    || { cat "$WORK/build.log" >&2; idem_die "private install failed"; }
symbols=$(nm -D "$PRIV$sys_libdir/idempotency.so")
grep -q __ubsan_handle <<<"$symbols" || idem_die "the built library is not instrumented"

# 3. Every server of the private installation runs under memcheck: its
#    postgres is a wrapper that starts the real binary under valgrind
#    (except for initdb's bootstrap and single-user runs and -V, which
#    need no checking and would only be slow).
export IDEM_BINDIR=$PRIV$sys_bindir
mv "$IDEM_BINDIR/postgres" "$IDEM_BINDIR/postgres.bin"
mkdir -p "$WORK/reports"
cat >"$IDEM_BINDIR/postgres" <<EOF
#!/bin/sh
case "\$1" in
--boot|--single|-V|--version|-C|--describe-config) exec "$IDEM_BINDIR/postgres.bin" "\$@" ;;
esac
exec valgrind --tool=memcheck --quiet --leak-check=no --error-limit=no --num-callers=40 \\
    --read-inline-info=yes --log-file="$WORK/reports/valgrind.%p" ${VALGRIND_OPTS:-} \\
    "$IDEM_BINDIR/postgres.bin" "\$@"
EOF
chmod 755 "$IDEM_BINDIR/postgres"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK"
SAN_ENV=("UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=0:log_path=$WORK/reports/ubsan")

IDEM_CLUSTER_DIR=$WORK/cluster
IDEM_PGDATA=$IDEM_CLUSTER_DIR/data
IDEM_PGHOST=$IDEM_CLUSTER_DIR/sock
IDEM_PGPORT=$(idem_free_port)
export IDEM_CLUSTER_DIR IDEM_PGDATA IDEM_PGHOST IDEM_PGPORT
idem_as_pg mkdir -p "$IDEM_PGHOST"
idem_as_pg initdb -D "$IDEM_PGDATA" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
    >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; idem_die "initdb failed"; }
{
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$IDEM_PGHOST'"
    echo "port = $IDEM_PGPORT"
    echo "max_prepared_transactions = 10"
    echo "max_connections = 40"
    echo "fsync = off"
    echo "huge_pages = off"
} | idem_as_pg tee -a "$IDEM_PGDATA/postgresql.conf" >/dev/null
idem_log "starting the server under valgrind"
idem_as_pg env "${SAN_ENV[@]}" pg_ctl -D "$IDEM_PGDATA" -l "$IDEM_CLUSTER_DIR/server.log" -w -t 600 start \
    >/dev/null || { cat "$IDEM_CLUSTER_DIR/server.log" >&2; idem_die "server did not start"; }
export PGHOST=$IDEM_PGHOST PGPORT=$IDEM_PGPORT PGUSER=postgres

# The server really runs under memcheck, with the sanitized library.
maps=$(idem_psql -At -d postgres -c "LOAD 'idempotency'" \
    -c "SELECT pg_read_file('/proc/' || pg_backend_pid() || '/maps')" 2>&1)
for lib in vgpreload_memcheck libubsan "$PRIV$sys_libdir/idempotency.so"; do
    grep -qF "$lib" <<<"$maps" || idem_die "the server has no $lib mapped: not a checked run"
done
idem_log "the server runs under memcheck with the sanitized idempotency.so"

passed=0
failed=0
summary=()
record() { passed=$((passed + $2)); failed=$((failed + $3)); summary+=("$(printf '%-10s %3d passed, %3d failed' "$1" "$2" "$3")"); }

mkdir -p "$WORK/src"
cp -a "$IDEM_TOP/test" "$WORK/src/"
[ ! -d "$IDEM_TOP/expected" ] || cp -a "$IDEM_TOP/expected" "$WORK/src/"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK/src"

run_suite() { # suite driver inputs...
    local suite=$1 driver=$2; shift 2
    local out="$WORK/$suite" log="$WORK/$suite.log" rc ok bad
    idem_as_pg mkdir -p "$out"
    idem_log "suite $suite (sanitized)"
    idem_as_pg "$driver" \
        --inputdir="$WORK/src/test" --outputdir="$out" \
        --bindir="$IDEM_BINDIR" --host="$IDEM_PGHOST" --port="$IDEM_PGPORT" \
        --user=postgres --dbname="idem_$suite" --load-extension=idempotency \
        "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ok=$(grep -cE ' \.\.\. +ok( |$)' "$log")
    bad=$(grep -cE ' \.\.\. +FAILED' "$log")
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    record "$suite" "$ok" "$bad"
    [ ! -s "$out/regression.diffs" ] || { echo "---- $suite: regression.diffs ----"; cat "$out/regression.diffs"; }
}

tests=${SANITIZE_REGRESS:-$(cd "$IDEM_TOP/test/sql" && ls *.sql | sed 's/\.sql$//' | sort)}
# shellcheck disable=SC2086
run_suite regress "$IDEM_PGXS_DIR/src/test/regress/pg_regress" $tests
if [ "${SANITIZE_ISOLATION:-1}" = 1 ]; then
    tests=$(cd "$IDEM_TOP/test/specs" && ls *.spec | sed 's/\.spec$//' | sort)
    # shellcheck disable=SC2086
    run_suite isolation "$IDEM_PGXS_DIR/src/test/isolation/pg_isolation_regress" $tests
fi

if [ -n "${SANITIZE_TAP:-}" ]; then
    idem_log "suite tap (sanitized): $SANITIZE_TAP"
    idem_as_pg mkdir -p "$WORK/tap"
    # Every server a TAP test starts comes from the private installation
    # (first in PATH), so it runs under memcheck too.
    # shellcheck disable=SC2086
    (cd "$WORK/src" && idem_as_pg env "${SAN_ENV[@]}" PG_TEST_TIMEOUT_DEFAULT=600 \
        PERL5LIB="$IDEM_PGXS_DIR/src/test/perl:$WORK/src/test/t" \
        PG_REGRESS="$IDEM_PGXS_DIR/src/test/regress/pg_regress" \
        TESTDIR="$WORK/tap" IDEM_TOP="$WORK/src" \
        prove $SANITIZE_TAP) 2>&1 | tee "$WORK/tap.log"
    rc=${PIPESTATUS[0]}
    files=$(grep -cE '^test/t/\S+\.pl \.+ ' "$WORK/tap.log")
    bad=$(grep -cE '^test/t/\S+\.pl \.+ .*(Dubious|Failed|skipped: )' "$WORK/tap.log")
    grep -q '^Result: PASS' "$WORK/tap.log" || [ "$bad" -gt 0 ] || bad=1
    record tap $((files - bad)) "$bad"
fi

idem_cluster_stop

# Any UBSan report, and any memcheck error with the extension's code on its
# stack, fails the run.
ours='idempotency\.so|\((batch|guard|idempotency|lease|machine|query|records|stats|token|worker)\.c:[0-9]+\)'
found=0
for r in "$WORK"/reports/ubsan*; do
    [ -s "$r" ] || continue
    echo "---- $(basename "$r") ----"
    head -n 60 "$r"
    found=$((found + 1))
done
vg_total=0
for r in "$WORK"/reports/valgrind.*; do
    [ -s "$r" ] || continue
    # Blocks are separated by "==PID== " lines; keep those naming our code.
    blocks=$(OURS="$ours" perl -ne '
        if (/^==\d+== $/) { print $b if $b =~ /$ENV{OURS}/; $b = ""; next }
        $b .= $_;
        END { print $b if $b =~ /$ENV{OURS}/ }' "$r")
    all=$(grep -cE '^==[0-9]+== [A-Z][a-z]' "$r")
    vg_total=$((vg_total + all))
    if [ -n "$blocks" ]; then
        echo "---- $(basename "$r") ----"
        head -n 80 <<<"$blocks"
        found=$((found + 1))
    fi
done
idem_log "memcheck: $vg_total reports in all; only those with the extension on the stack count"
if grep -qE 'runtime error:' "$IDEM_CLUSTER_DIR/server.log"; then
    grep -nE -A20 'runtime error:' "$IDEM_CLUSTER_DIR/server.log" | head -n 60
    found=$((found + 1))
fi
if [ "$found" -gt 0 ]; then record sanitizer 0 "$found"; else record sanitizer 1 0; fi

echo
echo "== sanitize summary"
for line in "${summary[@]}"; do echo "   $line"; done
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
