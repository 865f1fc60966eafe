#!/usr/bin/env bash
# `make test-matrix`: the test suites on every supported PostgreSQL major
# (15 to 19), then one table of version by suite with passed and failed
# counts, and a last line "N passed, N failed" over all of them.
#
#   MATRIX_FULL="15 16 17 18 19"   majors that run every suite (default: all)
#   MATRIX_QUICK=""                majors that run build + regress (on a
#                                  server without the preload) + isolation
#                                  + the extension-upgrade TAP test (+ the
#                                  Citus TAP tests, see MATRIX_CITUS)
#   MATRIX_UPGRADE="17:19"         OLD:NEW: the pg_upgrade TAP test runs in
#                                  NEW's tap suite, from a cluster of OLD
#                                  (empty: not run)
#   MATRIX_CITUS=""                majors with Citus (15 to 17; CI: "15 16
#                                  17"): test/scripts/citus.sh builds Citus into
#                                  each when it is missing (as root, about
#                                  5 minutes, once), and a quick major runs
#                                  the Citus TAP tests (test/t/*citus*.pl)
#                                  in its tap suite too (a full major runs
#                                  them anyway); a listed major still
#                                  without citus.so after that fails
#   IDEM_PG_CACHE=DIR              where source builds live, as DIR/pgNN
#                                  (default /var/cache/idempotency as root,
#                                  else ~/.cache/idempotency)
#   IDEM_PG_SOURCES=DIR            source snapshots and build.sh to build a
#                                  missing major (default: ../shared/postgresql
#                                  beside the checkout, when it exists)
#   PG_CONFIG_NN=PATH              use this pg_config for major NN instead
#
# PostgreSQL 15 is Debian 12's (installed when missing, as root).  A major
# that is neither in the cache nor buildable is reported as missing, and
# the run fails.  Each major's run is `bash test/scripts/run.sh` with PG_CONFIG set,
# so it builds into a private installation and writes nothing else.
set -u
. "$(dirname "$0")/harness.sh"

MATRIX_FULL=${MATRIX_FULL-15 16 17 18 19}
MATRIX_QUICK=${MATRIX_QUICK-}
MATRIX_UPGRADE=${MATRIX_UPGRADE-17:19}
MATRIX_CITUS=${MATRIX_CITUS-}
if [ "$(id -u)" -eq 0 ]; then
    IDEM_PG_CACHE=${IDEM_PG_CACHE:-/var/cache/idempotency}
else
    IDEM_PG_CACHE=${IDEM_PG_CACHE:-$HOME/.cache/idempotency}
fi
if [ -z "${IDEM_PG_SOURCES:-}" ] && [ -f "$IDEM_TOP/../shared/postgresql/build.sh" ]; then
    IDEM_PG_SOURCES=$(cd "$IDEM_TOP/../shared/postgresql" && pwd)
fi
IDEM_PG_SOURCES=${IDEM_PG_SOURCES:-}

# The pg_config of major v, building it first when it can; empty if not.
pg_config_of() { # v
    local v=$1 var="PG_CONFIG_$1" pgc
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    if [ "$v" = 15 ]; then
        idem_install_packages postgresql-15 postgresql-server-dev-15 >&2
        echo /usr/lib/postgresql/15/bin/pg_config
        return
    fi
    pgc=$IDEM_PG_CACHE/pg$v/bin/pg_config
    if [ ! -x "$pgc" ] && [ -n "$IDEM_PG_SOURCES" ] && [ -f "$IDEM_PG_SOURCES/postgresql-$v.tar.xz" ]; then
        idem_install_packages build-essential flex bison libreadline-dev zlib1g-dev pkg-config libipc-run-perl >&2
        mkdir -p "$IDEM_PG_CACHE"
        idem_log "building PostgreSQL $v into $IDEM_PG_CACHE/pg$v (5-6 minutes)"
        # Not as a sub-make of ours: PostgreSQL builds its generated headers
        # (utils/errcodes.h, ...) only when MAKELEVEL is 0.
        env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS -u MAKEOVERRIDES \
            bash "$IDEM_PG_SOURCES/build.sh" "$v" "$IDEM_PG_CACHE/pg$v" >&2 || rm -rf "$IDEM_PG_CACHE/pg$v"
    fi
    [ -x "$pgc" ] && echo "$pgc"
}

upgrade_old=${MATRIX_UPGRADE%%:*}
upgrade_new=${MATRIX_UPGRADE##*:}
rows=()
total_p=0
total_f=0
total_s=0
T0=$(date +%s)

# Is major v listed in MATRIX_CITUS?
citus_major() { # v
    local w
    for w in $MATRIX_CITUS; do [ "$w" = "$1" ] && return 0; done
    return 1
}

run_major() { # v kind
    local v=$1 kind=$2 pgc log line suites=() extra=() t0 taps
    pgc=$(pg_config_of "$v")
    if [ -z "$pgc" ]; then
        rows+=("$(printf '%-4s %-6s %s' "$v" "$kind" "missing: no pg_config (set PG_CONFIG_$v, or IDEM_PG_SOURCES to the source snapshots)")")
        total_f=$((total_f + 1))
        return
    fi
    if citus_major "$v"; then
        PG_CONFIG="$pgc" bash "$IDEM_TOP/test/scripts/citus.sh" >&2
        if [ ! -f "$("$pgc" --pkglibdir)/citus.so" ]; then
            rows+=("$(printf '%-4s %-6s %s' "$v" "$kind" "missing: citus.so (test/scripts/citus.sh did not install it, see above)")")
            total_f=$((total_f + 1))
        fi
    fi
    if [ "$kind" = quick ]; then
        suites=(regress isolation tap)
        taps=test/t/009_upgrade.pl
        if citus_major "$v"; then
            taps="$taps $(cd "$IDEM_TOP" && echo test/t/*citus*.pl)"
        fi
        # ... and regress on a server without the preload (stats_1.out).
        extra=(TAP_TESTS="$taps" IDEM_REGRESS_PRELOAD=0)
    fi
    if [ "$kind" = full ] && [ -n "$MATRIX_UPGRADE" ] && [ "$v" = "$upgrade_new" ]; then
        local oldpgc
        oldpgc=$(pg_config_of "$upgrade_old")
        [ -n "$oldpgc" ] && extra+=(IDEM_UPGRADE_FROM="$oldpgc")
    fi
    log=$(mktemp "${TMPDIR:-/tmp}/idem-matrix-$v.XXXXXX")
    t0=$(date +%s)
    idem_log "PostgreSQL $v: ${suites[*]:-every suite}"
    env PG_CONFIG="$pgc" "${extra[@]}" bash "$IDEM_TOP/test/scripts/run.sh" "${suites[@]}" 2>&1 | tee "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n 1)
    [ -n "$line" ] || line="0 passed, 1 failed"
    total_p=$((total_p + ${line%% passed*}))
    total_f=$((total_f + $(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$line")))
    case $line in *skipped) total_s=$((total_s + $(sed -E 's/.* ([0-9]+) skipped$/\1/' <<<"$line")));; esac
    rows+=("$(printf '%-4s %-6s %-34s %s' "$v" "$kind" "$line" \
        "$(sed -nE 's/^   ([a-z]+) +([0-9]+) passed, +([0-9]+) failed$/\1 \2\/\3/p; s/^   ([a-z]+) +([0-9]+) passed, +([0-9]+) failed, ([0-9]+) skipped$/\1 \2\/\3 (\4 skipped)/p' "$log" | tr '\n' ' ')") ($(( $(date +%s) - t0 )) s)")
    rm -f "$log"
}

for v in $MATRIX_FULL; do run_major "$v" full; done
for v in $MATRIX_QUICK; do run_major "$v" quick; done

echo
echo "== matrix (suite passed/failed), $(( $(date +%s) - T0 )) s"
printf '%-4s %-6s %-34s %s\n' PG runs total suites
for r in "${rows[@]}"; do echo "$r"; done
echo
if [ "$total_s" -gt 0 ]; then
    echo "$total_p passed, $total_f failed, $total_s skipped"
else
    echo "$total_p passed, $total_f failed"
fi
[ "$total_f" -eq 0 ]
