#!/usr/bin/env bash
# `make lint`: static analysis of src/*.c with cppcheck and clang-tidy,
# the security lint of every SQL and PL/pgSQL line we ship
# (test/scripts/sqllint.pl, see docs/security.md), and the shape of src/ (test/scripts/structure.sh: no circle of calls between
# the files, the call table of docs/internals.md current, no file over 750
# lines, no function over 80, a shared header under 200).  Exits non-zero on any finding of any tool (and prints each
# finding of the first two as file:line:column: severity: message [check]).
#
# As root, installs cppcheck and clang-tidy (and PostgreSQL's server
# headers) when they are missing; as another user it prints the apt-get
# command to run instead.
#
# Configuration:
#   clang-tidy  the checks are in .clang-tidy at the top of the checkout
#               (bug patterns, the clang static analyzer, CERT C; every
#               warning is an error).  The sources are analysed with
#               USE_ASSERT_CHECKING defined, so that variables read only
#               in Assert() are not reported as dead stores, and the
#               analyzer knows what the assertions promise.
#   cppcheck    --enable=warning,performance,portability against the real
#               PostgreSQL headers, in one configuration (the compiler's:
#               -D__GNUC__ -D__x86_64__), without checking the #ifdef
#               variants of the server headers themselves
#               (--config-exclude) and without reporting anything inside
#               them.  A finding that is a false positive is silenced in
#               the source with a justified comment:
#                   // cppcheck-suppress <id> -- reason
#               (--inline-suppr is on), or, for clang-tidy, NOLINT(<check>).
#
# Environment:
#   sql         test/scripts/sqllint.pl with PostgreSQL's own raw parser (the
#               helper test/lint/sqllint.c, built with PGXS into a scratch
#               directory and loaded into a throwaway cluster) over the
#               install sources (sql/idempotency.sql, sql/idempotency_*.sql:
#               the text of build/idempotency--VERSION.sql), the upgrade
#               sql/idempotency--*.sql, the released scripts of sql/released/
#               (what they run, not the bodies later upgrades replace: sqllint.pl,
#               released:), and the portable edition's generated
#               scripts (make portable tle, the embedded scripts included),
#               and the SQL string literals of src/*.c;
#               first its self-test: test/lint/bad.sql must give exactly the
#               findings of test/lint/bad.expected, test/lint/good.sql none.
#
#   commits     test/scripts/commits.sh: the subjects and bodies of the commits
#               made since the commit style was adopted (CONTRIBUTING.md)
#
#   LINT_TOOLS="cppcheck clang-tidy sql structure commits"   run only some of the tools
#   LINT_JOBS=N                        parallel jobs (default: nproc)
set -u
. "$(dirname "$0")/harness.sh"

idem_setup cppcheck clang-tidy

tools=${LINT_TOOLS:-"cppcheck clang-tidy sql structure commits"}
jobs=${LINT_JOBS:-$(nproc 2>/dev/null || echo 2)}
inc_server=$("$IDEM_PG_CONFIG" --includedir-server)
inc=$("$IDEM_PG_CONFIG" --includedir)
# shellcheck disable=SC2207
cppflags=($("$IDEM_PG_CONFIG" --cppflags))

cd "$IDEM_TOP" || idem_die "cannot enter $IDEM_TOP"
files=(src/*.c)
[ -e "${files[0]}" ] || idem_die "no C sources in src/"

out=$(mktemp -d "${TMPDIR:-/tmp}/idempotency-lint.XXXXXX")
lint_cleanup() { idem_cluster_stop; rm -rf "$out"; }
idem_on_exit lint_cleanup

status=0
template='{file}:{line}:{column}: {severity}: {message} [{id}]'

for tool in $tools; do
    case "$tool" in
    cppcheck)
        idem_log "cppcheck $(cppcheck --version | sed 's/^Cppcheck //') on ${#files[@]} files"
        cppcheck -q -j "$jobs" --std=c99 \
            --enable=warning,performance,portability \
            --error-exitcode=1 --inline-suppr \
            --suppress=missingIncludeSystem \
            --suppress="*:$inc_server/*" --suppress="*:$inc/*" --suppress='*:/usr/include/*' \
            --config-exclude="$inc_server" --config-exclude="$inc" \
            -D__GNUC__=12 -D__x86_64__ -D__linux__ \
            -I src -I "$inc_server" -I "$inc" \
            --template="$template" \
            "${files[@]}" >"$out/cppcheck.log" 2>&1
        rc=$?
        if [ -s "$out/cppcheck.log" ] || [ "$rc" -ne 0 ]; then
            cat "$out/cppcheck.log"
            echo "cppcheck: findings (exit $rc)"
            status=1
        else
            echo "cppcheck: clean"
        fi
        ;;
    clang-tidy)
        idem_log "$(clang-tidy --version | grep -o 'LLVM version [0-9.]*' | sed 's/LLVM/clang-tidy/') on ${#files[@]} files"
        # One process per file, $jobs at a time; each writes its own log.
        printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} sh -c '
            f=$1; shift
            log="$0/$(basename "$f").tidy"
            clang-tidy --quiet "$f" -- "$@" >"$log" 2>&1 || echo "$f" >>"$0/failed"
        ' "$out" {} \
            -std=gnu99 -DUSE_ASSERT_CHECKING "${cppflags[@]}" \
            -I src -I "$inc_server" -I "$inc"
        # "N warnings generated." counts the suppressed ones in system
        # headers too; only real diagnostics are kept.
        found=0
        for log in "$out"/*.tidy; do
            if grep -qE '(warning|error):' "$log"; then
                grep -vE '^[0-9]+ (warnings?|errors?) (generated|treated as errors?)\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Use -system-headers|^Error while processing' "$log"
                found=1
            fi
        done
        if [ "$found" -ne 0 ] || [ -s "$out/failed" ]; then
            [ -s "$out/failed" ] && sed 's/^/clang-tidy failed on: /' "$out/failed"
            echo "clang-tidy: findings"
            status=1
        else
            echo "clang-tidy: clean"
        fi
        ;;
    sql)
        idem_log "sql: test/scripts/sqllint.pl (PostgreSQL $IDEM_PG_MAJOR's raw parser)"
        chmod 755 "$out"
        mkdir -p "$out/sqllint" && cp test/lint/sqllint.c test/lint/Makefile "$out/sqllint/"
        if ! make -s -C "$out/sqllint" PG_CONFIG="$IDEM_PG_CONFIG" >"$out/sqllint.log" 2>&1; then
            cat "$out/sqllint.log"; echo "sql: the parser helper did not build"; status=1; continue
        fi
        if ! make -s portable tle >"$out/portable.log" 2>&1; then
            cat "$out/portable.log"; echo "sql: make portable tle failed"; status=1; continue
        fi
        mkdir -p "$out/cluster"
        if [ "$(id -u)" -eq 0 ]; then chown postgres: "$out/cluster"; fi
        idem_cluster_start "$out/cluster"
        psql_cmd="$IDEM_BINDIR/psql -X -h $PGHOST -p $PGPORT -U postgres -d postgres"
        $psql_cmd -q -c "CREATE FUNCTION sqllint_parse(pg_catalog.text, pg_catalog.int4) RETURNS pg_catalog.text
            AS '$out/sqllint/sqllint.so', 'sqllint_parse' LANGUAGE C STRICT" || idem_die "cannot load the parser helper"
        export SQLLINT_PSQL="$psql_cmd"
        # The self-test: the known-bad shapes are all found, the good ones not.
        perl test/scripts/sqllint.pl test/lint/bad.sql >"$out/bad.out" 2>&1
        sed -nE 's/^[^ :]+:([0-9]+): \[([a-z-]+)\].*/\1 \2/p' "$out/bad.out" | sort -n | uniq >"$out/bad.found"
        # and bad.expected names every line marked "-- bad" in bad.sql.
        grep -n -- '-- bad:' test/lint/bad.sql | cut -d: -f1 >"$out/bad.marked"
        if ! cut -d' ' -f1 test/lint/bad.expected | uniq | diff -u "$out/bad.marked" - >"$out/bad.marks"; then
            cat "$out/bad.marks"; echo "sql: test/lint/bad.expected does not name every line marked -- bad: in bad.sql"; status=1
        fi
        if ! diff -u test/lint/bad.expected "$out/bad.found"; then
            cat "$out/bad.out"; echo "sql: self-test failed (test/lint/bad.sql)"; status=1
        elif ! perl test/scripts/sqllint.pl test/lint/good.sql; then
            echo "sql: self-test failed (test/lint/good.sql)"; status=1
        else
            echo "sql: self-test passed ($(wc -l <test/lint/bad.expected) known-bad findings, good shapes clean)"
        fi
        sql_files=(sql/idempotency.sql sql/idempotency_*.sql)
        for f in sql/idempotency--*.sql; do [ -f "$f" ] && sql_files+=("$f"); done
        # Scripts of releases that are out: their DO blocks and top-level
        # statements (what CREATE/ALTER EXTENSION runs), not their function
        # bodies, which the upgrades replace (sqllint.pl, released:).
        for f in sql/released/idempotency--*.sql; do sql_files+=("released:$f"); done
        sql_files+=(build/portable/idempotency--*.sql build/portable/idempotency-portable--*.sql
                    build/tle/idempotency--pgtle.sql src/*.c)
        if perl test/scripts/sqllint.pl "${sql_files[@]}"; then
            echo "sql: clean"
        else
            echo "sql: findings"
            status=1
        fi
        idem_cluster_stop
        ;;
    commits)
        idem_log "commit style (test/scripts/commits.sh)"
        bash "$IDEM_TOP/test/scripts/commits.sh" || status=1
        ;;
    structure)
        idem_log "structure of src/ (test/scripts/structure.sh)"
        bash "$IDEM_TOP/test/scripts/structure.sh" || status=1
        ;;
    *)
        idem_die "unknown lint tool: $tool"
        ;;
    esac
done

if [ "$status" -eq 0 ]; then
    echo "lint: clean"
else
    echo "lint: FAILED"
fi
exit "$status"
