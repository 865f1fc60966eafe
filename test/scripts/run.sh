#!/usr/bin/env bash
# `make test`: install what is missing, build and install the extension,
# then run every suite against throwaway clusters:
#   regress    pg_regress files in test/sql, outputs in expected/
#   isolation  isolation specs in test/specs, outputs in expected/
#   tap        TAP tests in test/t (each starts its own clusters)
#   examples   the client examples in examples/ and the META.json check:
#              by default only those whose client toolchain (Python with
#              psycopg2, Node and npm, a JDK with the JDBC driver) is
#              installed already, the others named as skipped in the
#              summary; with IDEM_EXAMPLES=1 (make test-examples, CI) the
#              missing toolchains are installed (as root) and all run
#   docs       every SQL block of README.md and docs/*.md, and their links
#              (test/scripts/doctest.sh)
#   lint       cppcheck and clang-tidy on src/, the SQL security lint
#              (test/scripts/sqllint.pl) and the shape of src/ (test/scripts/lint.sh)
# Prints a summary and exits non-zero when anything failed.
#
# Usage: bash test/scripts/run.sh [suite...]     (default: every suite)
#        TESTS="claim_basic 004_await" bash test/scripts/run.sh
#                 only these tests (by name, in whichever suite has them)
set -u
. "$(dirname "$0")/harness.sh"

suites=("$@")
if [ ${#suites[@]} -eq 0 ] && [ -n "${TESTS:-}" ]; then
    suites=(regress isolation tap)
fi
[ ${#suites[@]} -gt 0 ] || suites=(lint regress isolation tap examples docs)

# Everything a run installs (as root, when missing) is installed and named
# at its start, those of test/scripts/lint.sh and examples/run.sh too (keep these
# lists in step with theirs).
extra_packages=()
for suite in "${suites[@]}"; do
    if [ "$suite" = lint ]; then
        # test/scripts/lint.sh (its SQL lint needs only perl, make, gcc and
        # the server headers, which every run installs)
        extra_packages+=(cppcheck clang-tidy)
    fi
    if [ "$suite" = tap ]; then
        extra_packages+=(pgbouncer)                    # test/t/031_lease_pgbouncer.pl
    fi
    if [ "$suite" = examples ] && [ "${IDEM_EXAMPLES:-0}" = 1 ]; then
        extra_packages+=(python3 python3-psycopg2 default-jdk-headless libpostgresql-jdbc-java)
        if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
            extra_packages+=(nodejs npm)
        fi
    fi
done
idem_setup "${extra_packages[@]}"

# The examples that can run without installing anything (IDEM_EXAMPLES
# unset): each needs its client toolchain present; the others are skipped
# with the reason.  Sets example_checks and example_skips ("name: reason").
example_checks=(); example_skips=()
examples_available() {
    local c need why
    if [ "${IDEM_EXAMPLES:-0}" = 1 ]; then
        example_checks=(meta python node java http outbox)
        return
    fi
    for c in meta python node java http outbox; do
        need=; why=
        case $c in
            meta) need="python3" ;;
            python|outbox) need="python3 python3-psycopg2" ;;
            java) need="default-jdk-headless libpostgresql-jdbc-java" ;;
            node) command -v node >/dev/null && command -v npm >/dev/null || why="node and npm are not installed" ;;
            http) need="python3 python3-psycopg2"
                  command -v node >/dev/null && command -v npm >/dev/null || why="node and npm are not installed" ;;
        esac
        if [ -z "$why" ] && [ -n "$need" ] && command -v dpkg-query >/dev/null; then
            # shellcheck disable=SC2086
            need=$(idem_missing_packages $need)
            [ -z "$need" ] || why="needs the Debian packages $need"
        fi
        if [ -z "$why" ]; then
            example_checks+=("$c")
        else
            example_skips+=("$c: $why (IDEM_EXAMPLES=1 bash test/scripts/run.sh examples, or make test-examples, installs them as root)")
        fi
    done
}

WORK=$(idem_workdir)
idem_work_trap

idem_private_install "$WORK"

# An older major for the pg_upgrade TAP test (test/scripts/matrix.sh sets it).
IDEM_OLD_BINDIR=
if [ -n "${IDEM_UPGRADE_FROM:-}" ]; then
    (IDEM_PG_CONFIG=$IDEM_UPGRADE_FROM && idem_private_install "$WORK/old" && echo "$IDEM_BINDIR" >"$WORK/old.bindir") \
        || idem_die "could not build for $IDEM_UPGRADE_FROM"
    IDEM_OLD_BINDIR=$(cat "$WORK/old.bindir")
fi

# Stage what the postgres OS user must read (the checkout may be private).
mkdir -p "$WORK/src"
cp -a "$IDEM_TOP/test" "$IDEM_TOP/expected" "$WORK/src/"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK"

# Time limits: a suite that runs longer than this fails (it hangs, most
# likely); one statement of regress or isolation longer than
# IDEM_STATEMENT_TIMEOUT fails with 57014.
IDEM_SUITE_TIMEOUT=${IDEM_SUITE_TIMEOUT:-1800}

passed=0
failed=0
summary=()
failures=()   # "suite: name" of every failed test, repeated at the end
digest="$WORK/failures.digest"   # short excerpts, printed after the summary

skipped=0
skips=()      # "suite: name: reason" of every skipped test, listed at the end
record() { # suite pass fail [skipped]
    passed=$((passed + $2)); failed=$((failed + $3)); skipped=$((skipped + ${4:-0}))
    if [ "${4:-0}" -gt 0 ]; then
        summary+=("$(printf '%-10s %3d passed, %3d failed, %d skipped' "$1" "$2" "$3" "$4")")
    else
        summary+=("$(printf '%-10s %3d passed, %3d failed' "$1" "$2" "$3")")
    fi
}

# pg_regress and pg_isolation_regress print one line per test ending in
# "ok" or "FAILED"; count them.
count_results() { # logfile -> "pass fail"
    local ok bad
    # "test name ... ok" (15), "ok 1 - name" (16 on: TAP)
    ok=$(grep -cE ' \.\.\. +ok( |$)|^ok [0-9]+ ' "$1")
    bad=$(grep -cE ' \.\.\. +FAILED|^not ok [0-9]+ ' "$1")
    echo "$ok $bad"
}

run_pg_regress() { # suite driver inputs...
    local suite=$1 driver=$2; shift 2
    local out="$WORK/$suite" log="$WORK/$suite.log" rc
    idem_as_pg mkdir -p "$out"
    idem_log "suite $suite"
    # Every statement is bounded (a wait that overruns fails with 57014,
    # named in the diff) and so is the whole suite (timeout).
    idem_as_pg env PGOPTIONS="-c statement_timeout=${IDEM_STATEMENT_TIMEOUT:-180s}" \
        timeout --kill-after=10 "$IDEM_SUITE_TIMEOUT" "$driver" \
        --inputdir="$WORK/src/test" --outputdir="$out" \
        --bindir="$IDEM_BINDIR" --host="$IDEM_PGHOST" --port="$IDEM_PGPORT" \
        --user=postgres --dbname="idem_$suite" --load-extension=idempotency \
        "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    read -r p f < <(count_results "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || failures+=("$suite: timed out after $IDEM_SUITE_TIMEOUT s (see its last test above)")
    record "$suite" "$p" "$f"
    while read -r name; do failures+=("$suite: $name"); done \
        < <(sed -nE 's/^[[:space:]]*(not ok [0-9]+ +[-+ ]*|test |[-+] )?([A-Za-z0-9_]+) +\.\.\. +FAILED.*/\2/p' "$log")
    if [ -s "$out/regression.diffs" ]; then
        echo "---- $suite: regression.diffs ----"
        cat "$out/regression.diffs"
        { echo "---- $suite: regression.diffs (up to 50 lines per test) ----"
          awk '/^diff / { n = 0 } n++ < 50' "$out/regression.diffs"; } >>"$digest"
    fi
}

# TESTS="claim_basic lease_race 004_await": run only these tests of the
# suites that have them (regress and isolation by name, tap by the file
# name test/t/NAME.pl); a suite left with none is skipped.
only() { # names on stdin -> those in TESTS (all without TESTS)
    if [ -z "${TESTS:-}" ]; then cat; return; fi
    grep -xF -f <(tr ' ,' '\n\n' <<<"$TESTS" | sed '/^$/d') || true
}
if [ -n "${TESTS:-}" ] && [ -z "${TAP_TESTS:-}" ]; then
    TAP_TESTS=$(cd "$IDEM_TOP" && ls test/t/*.pl | sed 's|^test/t/||; s|\.pl$||' | only | sed 's|^|test/t/|; s|$|.pl|' | tr '\n' ' ')
    [ -n "$TAP_TESTS" ] || TAP_TESTS=none
fi

for suite in "${suites[@]}"; do
    if [ -n "${TESTS:-}" ]; then
        case "$suite" in
        regress) [ -n "$(cd "$IDEM_TOP/test/sql" && ls *.sql | sed 's/\.sql$//' | only)" ] || continue ;;
        isolation) [ -n "$(cd "$IDEM_TOP/test/specs" && ls *.spec | sed 's/\.spec$//' | only)" ] || continue ;;
        tap) [ "$TAP_TESTS" != none ] || continue ;;
        *) continue ;;
        esac
    fi
    case "$suite" in
    regress|isolation)
        if [ -z "${IDEM_PGDATA:-}" ]; then
            # Preloaded, so the regression suite covers the statistics
            # counters too (IDEM_REGRESS_PRELOAD=0: a server without it, as
            # expected/stats_1.out shows; make installcheck takes either).
            if [ "${IDEM_REGRESS_PRELOAD:-1}" = 1 ]; then
                idem_cluster_start "$WORK/cluster" "shared_preload_libraries = 'idempotency'"
            else
                idem_cluster_start "$WORK/cluster"
            fi
        fi
        ;;
    esac
    case "$suite" in
    regress)
        tests=$(cd "$IDEM_TOP/test/sql" && ls *.sql | sed 's/\.sql$//' | sort | only)
        # shellcheck disable=SC2086
        run_pg_regress regress "$IDEM_PGXS_DIR/src/test/regress/pg_regress" $tests
        ;;
    isolation)
        tests=$(cd "$IDEM_TOP/test/specs" && ls *.spec | sed 's/\.spec$//' | sort | only)
        # shellcheck disable=SC2086
        run_pg_regress isolation "$IDEM_PGXS_DIR/src/test/isolation/pg_isolation_regress" $tests
        ;;
    tap)
        idem_log "suite tap"
        idem_as_pg mkdir -p "$WORK/tap"
        log="$WORK/tap.log"
        (cd "$WORK/src" && idem_as_pg env \
            PERL5LIB="$IDEM_PGXS_DIR/src/test/perl:$WORK/src/test/t" \
            PG_REGRESS="$IDEM_PGXS_DIR/src/test/regress/pg_regress" \
            TESTDIR="$WORK/tap" IDEM_TOP="$WORK/src" IDEM_OLD_BINDIR="$IDEM_OLD_BINDIR" \
            timeout --kill-after=10 "$IDEM_SUITE_TIMEOUT" \
            prove ${PROVE_FLAGS:-} ${TAP_TESTS:-test/t/*.pl}) 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || failures+=("tap: timed out after $IDEM_SUITE_TIMEOUT s (see its last test above)")
        files=$(grep -cE '^test/t/\S+\.pl \.+ ' "$log")
        bad=$(grep -cE '^test/t/\S+\.pl \.+ .*(Dubious|Failed)' "$log")
        skip=$(grep -cE '^test/t/\S+\.pl \.+ skipped: ' "$log")
        # prove says NOTESTS when every test it ran skipped (TAP_TESTS=one skipped test).
        grep -q '^Result: PASS' "$log" || [ "$bad" -gt 0 ] ||
            { grep -q '^Result: NOTESTS' "$log" && [ "$files" -gt 0 ] && [ "$skip" -eq "$files" ]; } || bad=1
        record tap $((files - bad - skip)) "$bad" "$skip"
        while read -r line; do skips+=("tap: $line"); done \
            < <(sed -nE 's/^(test\/t\/\S+\.pl) \.+ skipped: (.*)/\1: \2/p' "$log")
        while read -r name; do failures+=("tap: $name"); done \
            < <(grep -oE '^test/t/\S+\.pl \.+ .*(Dubious|Failed)' "$log" | awk '{ print $1 }')
        if [ "$rc" -ne 0 ]; then
            for f in "$WORK"/tap/tmp_check/log/regress_log_*; do
                [ -f "$f" ] || continue
                echo "---- $(basename "$f") (last 60 lines) ----"
                tail -n 60 "$f"
            done
            { echo "---- tap: failed assertions ----"
              grep -E '^(not ok|#   Failed|#   at |#  +(got|expected):)' "$log" | head -n 60; } >>"$digest"
        fi
        ;;
    examples)
        [ -n "${IDEM_PGDATA:-}" ] || idem_cluster_start "$WORK/cluster"
        idem_log "suite examples"
        examples_available
        for line in "${example_skips[@]}"; do skips+=("examples: $line"); done
        if [ ${#example_checks[@]} -gt 0 ]; then
            bash "$IDEM_TOP/examples/run.sh" "${example_checks[@]}" 2>&1 | tee "$WORK/examples.log"
            rc=${PIPESTATUS[0]}
        else
            : >"$WORK/examples.log"; rc=0
        fi
        read -r p f < <(count_results "$WORK/examples.log")
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        record examples "$p" "$f" "${#example_skips[@]}"
        while read -r name; do failures+=("examples: $name"); done \
            < <(sed -nE 's/^[a-z]+ +(\S+) +\.\.\. +FAILED.*/\1/p' "$WORK/examples.log")
        { grep -A12 -E '^[a-z]+ +\S+ +\.\.\. +FAILED' "$WORK/examples.log" | head -n 40; } >>"$digest"
        ;;
    docs)
        idem_log "suite docs"
        IDEM_DOCTEST_INSTALLED=1 bash "$IDEM_TOP/test/scripts/doctest.sh" 2>&1 | tee "$WORK/docs.log"
        rc=${PIPESTATUS[0]}
        read -r p f < <(count_results "$WORK/docs.log")
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        record docs "$p" "$f"
        while read -r name; do failures+=("docs: $name"); done \
            < <(sed -nE 's/^docs +(\S+) +\.\.\. +FAILED.*/\1/p' "$WORK/docs.log")
        { grep -A20 -E '^docs +\S+ +\.\.\. +FAILED' "$WORK/docs.log" | head -n 60; } >>"$digest"
        ;;
    lint)
        idem_log "suite lint"
        if bash "$IDEM_TOP/test/scripts/lint.sh"; then record lint 1 0; else record lint 0 1; fi
        ;;
    *)
        idem_die "unknown suite: $suite"
        ;;
    esac
done

echo
if [ ${#failures[@]} -gt 0 ] || [ -s "$digest" ]; then
    echo "== failures"
    for line in "${failures[@]}"; do echo "   $line"; done
    [ -s "$digest" ] && cat "$digest"
    echo
fi
echo "== summary"
for line in "${summary[@]}"; do echo "   $line"; done
for line in "${skips[@]}"; do echo "   skipped $line"; done
echo
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
