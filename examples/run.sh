#!/usr/bin/env bash
# Run the client examples and check what they did, not only what they said:
#
#   meta     META.json is valid PGXN metadata whose version equals
#            default_version in idempotency.control (and CHANGELOG.md has
#            an entry for it)
#   python   examples/python/consumer.py   (psycopg2, idem_claim_many)
#   node     examples/node/handler.js      (pg from npm, idem_begin/idem_finish)
#   java     examples/java/PaymentCallback.java (JDBC, idem_claim + idem_guard)
#   http     examples/http/: Express and Python middleware for the HTTP
#            Idempotency-Key header (idem_http_begin/idem_http_finish);
#            its checks are in examples/http/checks.sh
#   outbox   examples/outbox/outbox.py: producer claim + idem_publish,
#            consumers idem_outbox_fetch -> idem_inbox -> apply -> ack;
#            its checks are in examples/outbox/checks.sh
#
# Each example runs twice in a fresh database of its own: the first run must
# apply every effect exactly once, the second (everything redelivered) must
# change nothing.  Prints one "... ok" / "... FAILED" line per check and
# exits non-zero when any failed.
#
# Usage: bash examples/run.sh [-v] [meta|python|node|java|http|outbox ...]   (default: all)
#   -v   also print what each example printed
#
# With PGHOST set (as test/scripts/harness.sh's idem_cluster_start exports it), the
# examples use that server, which must have the extension installed.
# Without PGHOST, this builds and installs the extension and starts a
# throwaway cluster, removed again on exit.  As root, the Debian packages
# the examples need are installed first (as another user, the missing ones
# are named).  KEEP_WORK=1 keeps the databases, the work directory and a
# throwaway cluster (running; how to reach and stop it is printed).
set -u
EXAMPLES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/scripts/harness.sh
. "$EXAMPLES/../test/scripts/harness.sh"
TOP=$IDEM_TOP

verbose=0
if [ "${1:-}" = -v ]; then verbose=1; shift; fi
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(meta python node java http outbox)
for c in "${checks[@]}"; do
    case "$c" in meta|python|node|java|http|outbox) ;; *) idem_die "unknown example: $c (meta, python, node, java, http, outbox)";; esac
done

# The packages of the checks asked for only (test/scripts/run.sh asks
# only for those whose toolchain is present unless IDEM_EXAMPLES=1).
packages=""
for c in "${checks[@]}"; do
    case "$c" in
        meta) packages="$packages python3" ;;
        python|outbox) packages="$packages python3 python3-psycopg2" ;;
        java) packages="$packages default-jdk-headless libpostgresql-jdbc-java" ;;
        node|http)
            [ "$c" = node ] || packages="$packages python3 python3-psycopg2"
            if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
                packages="$packages nodejs npm"
            fi ;;
    esac
done
# shellcheck disable=SC2086
idem_setup $packages

PYTHON=${PYTHON:-/usr/bin/python3}          # Debian's, where python3-psycopg2 lives
JDBC_JAR=${JDBC_JAR:-/usr/share/java/postgresql.jar}
PSQL="$IDEM_BINDIR/psql"

WORK=$(mktemp -d /tmp/idempotency-examples.XXXXXX)
own_cluster=0
databases=()
cleanup() {
    if [ "${KEEP_WORK:-0}" = 1 ]; then
        echo "work directory kept: $WORK (databases: ${databases[*]:-none})" >&2
        if [ "$own_cluster" = 1 ]; then
            echo "cluster kept running: PGHOST=$PGHOST PGPORT=$PGPORT PGUSER=$PGUSER" >&2
            local as=""
            [ "$(id -u)" -ne 0 ] || as="runuser -u postgres -- "
            echo "stop it with: $as$IDEM_BINDIR/pg_ctl -D $IDEM_PGDATA stop; rm -rf $cluster_work" >&2
        fi
        return
    fi
    if [ "$own_cluster" = 1 ]; then
        idem_cluster_stop
        rm -rf "$cluster_work"
    else
        local db
        for db in "${databases[@]}"; do
            "$PSQL" -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
        done
    fi
    rm -rf "$WORK"
}
idem_on_exit cleanup

if [ -z "${PGHOST:-}" ]; then
    idem_build_install
    idem_log "starting a throwaway PostgreSQL cluster"
    cluster_work=$(idem_workdir)
    own_cluster=1
    idem_cluster_start "$cluster_work/cluster"
fi
unset PGDATABASE PGSERVICE

passed=0
failed=0
problems=()

problem() { problems+=("$*"); }

# report NAME OUTPUT-FILES...: print the verdict line, and the outputs when
# something failed (or with -v).
report() {
    local name=$1 f p; shift
    if [ ${#problems[@]} -eq 0 ]; then
        printf '%-36s ... ok\n' "$name"
        passed=$((passed + 1))
    else
        printf '%-36s ... FAILED\n' "$name"
        failed=$((failed + 1))
        for p in "${problems[@]}"; do echo "    - $p"; done
    fi
    if [ ${#problems[@]} -gt 0 ] || [ "$verbose" = 1 ]; then
        for f in "$@"; do
            [ -f "$f" ] || continue
            echo "    ---- $(basename "$f") ----"
            sed 's/^/    | /' "$f"
        done
    fi
    problems=()
}

# new_db NAME: a fresh database for one example, in $db.
new_db() {
    local err
    db="idem_example_$1_$$"
    err=$("$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$db\"" 2>&1) \
        || { problem "could not create database $db: $err"; return 1; }
    databases+=("$db")
}

# sql DB QUERY: one value
sql() { "$PSQL" -X -q -tA -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>&1; }

# expect_sql DB WHAT QUERY EXPECTED
expect_sql() {
    local got
    got=$(sql "$1" "$3")
    [ "$got" = "$4" ] || problem "$2: expected '$4', got '$got'"
}

# expect_count FILE WHAT EXTENDED-REGEX N: the regex matches N lines
expect_count() {
    local n
    n=$(grep -cE -- "$3" "$1")
    [ "$n" = "$4" ] || problem "$2: expected $4 line(s) matching /$3/, found $n"
}

# run_example LOG COMMAND...: run in the top directory; a non-zero exit
# status is a problem (and the caller skips the checks of its effects).
run_example() {
    local log=$1 rc; shift
    (cd "$TOP" && timeout 120 "$@") >"$log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || problem "$(basename "$log"): exit status $rc"
    return "$rc"
}

check_meta() {
    local out=$WORK/meta.out
    if ! "$PYTHON" - "$TOP" >"$out" 2>&1 <<'PY'
import json, os, re, sys
top = sys.argv[1]
errors = []
with open(os.path.join(top, "idempotency.control")) as f:
    m = re.search(r"^default_version\s*=\s*'([^']*)'", f.read(), re.M)
control_version = m.group(1) if m else None
if not control_version:
    errors.append("no default_version in idempotency.control")
try:
    with open(os.path.join(top, "META.json")) as f:
        meta = json.load(f)
except (OSError, ValueError) as e:
    sys.exit(f"META.json: {e}")
for field in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
    if field not in meta:
        errors.append(f"META.json lacks the required field {field!r}")
if meta.get("meta-spec", {}).get("version") != "1.0.0":
    errors.append("meta-spec.version is not 1.0.0")
if meta.get("name") != "idempotency":
    errors.append(f"name is {meta.get('name')!r}, not 'idempotency'")
if meta.get("version") != control_version:
    errors.append(f"version {meta.get('version')!r} differs from default_version {control_version!r} of idempotency.control")
if not re.fullmatch(r"\d+\.\d+\.\d+", str(meta.get("version"))):
    errors.append(f"version {meta.get('version')!r} is not a semantic version")
ext = meta.get("provides", {}).get("idempotency")
if not ext:
    errors.append("provides has no entry 'idempotency'")
else:
    if ext.get("version") != control_version:
        errors.append(f"provides.idempotency.version {ext.get('version')!r} differs from {control_version!r}")
    for key in ("file", "docfile"):
        if key in ext and not os.path.isfile(os.path.join(top, ext[key])):
            errors.append(f"provides.idempotency.{key} {ext[key]!r} does not exist")
if meta.get("license") != "postgresql":
    errors.append("license is not 'postgresql'")
with open(os.path.join(top, "LICENSE")) as f:
    if "PostgreSQL License" not in f.readline():
        errors.append("LICENSE does not start with the PostgreSQL License")
with open(os.path.join(top, "CHANGELOG.md")) as f:
    if not re.search(r"^## " + re.escape(str(control_version)) + r"\b", f.read(), re.M):
        errors.append(f"CHANGELOG.md has no '## {control_version}' entry")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
    then
        problem "META.json check failed (see below)"
    fi
    report "meta META.json" "$out"
}

check_python() {
    local db out1=$WORK/python-run1.out out2=$WORK/python-run2.out
    if new_db python && PGDATABASE=$db run_example "$out1" "$PYTHON" examples/python/consumer.py; then
        expect_sql "$db" "balances" \
            "SELECT string_agg(owner || '=' || balance, ',' ORDER BY owner) FROM wallets" "alice=18,bob=34"
        expect_sql "$db" "wallet entries/distinct messages" \
            "SELECT count(*) || '/' || count(DISTINCT message_id) FROM wallet_entries" "8/8"
        expect_sql "$db" "claimed message ids" \
            "SELECT string_agg(key, ',' ORDER BY key) FROM idem_records WHERE scope = 'wallet-topups'" \
            "m-1,m-2,m-3,m-4,m-5,m-6,m-7,m-8"
        expect_count "$out1" "redelivered m-3" 'message m-3: duplicate, skipped' 2
        expect_count "$out1" "crashed batch" 'crashed before commit: transaction rolled back' 1
        expect_count "$out1" "m-4 credited before the crash and after the redelivery" 'message m-4: credited 7 to bob' 2
        expect_count "$out1" "m-6 twice in one batch" 'message m-6: (credited|duplicate)' 2
        expect_count "$out1" "concurrent m-7 credited by one consumer" 'consumer-[12]\] message m-7: credited' 1
        expect_count "$out1" "concurrent m-7 skipped by the other" 'consumer-[12]\] message m-7: duplicate, skipped' 1
        expect_count "$out1" "summary" '^Balances: alice=18, bob=34; 8 wallet entries for 8 distinct messages\.$' 1
        # Everything redelivered once more: nothing may change.
        if PGDATABASE=$db run_example "$out2" "$PYTHON" examples/python/consumer.py; then
            expect_count "$out2" "second run credits" ': credited ' 0
            expect_sql "$db" "balances after the second run" \
                "SELECT string_agg(owner || '=' || balance, ',' ORDER BY owner) FROM wallets" "alice=18,bob=34"
            expect_sql "$db" "wallet entries after the second run" "SELECT count(*) FROM wallet_entries" "8"
        fi
    fi
    report "example python/consumer.py" "$out1" "$out2"
}

check_node() {
    local db key charges out0=$WORK/npm-ci.out out1=$WORK/node-run1.out out2=$WORK/node-run2.out
    # A copy of the example directory, so that node_modules stays out of
    # the checkout; npm ci installs exactly what package-lock.json pins.
    local app=$WORK/node
    mkdir -p "$app"
    cp "$EXAMPLES/node/package.json" "$EXAMPLES/node/package-lock.json" "$EXAMPLES/node/handler.js" "$app/"
    if ! (cd "$app" && npm ci --no-audit --no-fund --loglevel=error) >"$out0" 2>&1; then
        problem "npm ci failed for examples/node"
    elif new_db node && PGDATABASE=$db run_example "$out1" node "$app/handler.js"; then
        expect_sql "$db" "gateway charges per key" \
            "SELECT string_agg(request_key || ':' || n, ',' ORDER BY request_key)
               FROM (SELECT request_key, count(*) AS n FROM gateway_charges GROUP BY 1) c" \
            "req-1:1,req-2:1,req-3:1"
        expect_sql "$db" "idempotency records" \
            "SELECT string_agg(key || ':' || status || ':' || attempts, ',' ORDER BY key)
               FROM idem_records WHERE scope = 'POST /payments'" \
            "req-1:completed:1,req-2:completed:1,req-3:completed:2,req-4:failed:1"
        expect_count "$out1" "first req-1" 'key=req-1 .* -> 201 \{"charge":"ch_[0-9]+","amount":25\}$' 1
        expect_count "$out1" "req-1 replayed" 'key=req-1 .* -> 201 .*"charge":"ch_[0-9]+".* \(replayed\)$' 1
        expect_count "$out1" "double click: one execution" 'key=req-2 .* -> 201 \{"charge":"ch_[0-9]+","amount":40\}$' 1
        expect_count "$out1" "double click: one replay" 'key=req-2 .* -> 201 .* \(replayed\)$' 1
        for key in req-1 req-2; do
            charges=$(grep -E "key=$key .* -> 201 " "$out1" | grep -oE 'ch_[0-9]+' | sort -u | wc -l)
            [ "$charges" = 1 ] || problem "$key: the replay names another charge than the original"
        done
        expect_count "$out1" "reused key" 'key=req-1 \{"amount":99,.* -> 422 ' 1
        expect_count "$out1" "transient failure, then success" \
            'key=req-3 .* -> (503 .*|201 \{"charge":"ch_[0-9]+","amount":10\})$' 2
        expect_count "$out1" "declined, then replayed" 'key=req-4 .* -> 402 .*' 2
        expect_count "$out1" "replays in the first run" '\(replayed\)$' 3
        expect_count "$out1" "summary" '^The gateway made 3 charges for 3 distinct idempotency keys\.$' 1
        # Every request once more: all replayed, no new charge.
        if PGDATABASE=$db run_example "$out2" node "$app/handler.js"; then
            expect_count "$out2" "replays in the second run" '\(replayed\)$' 8
            expect_sql "$db" "gateway charges after the second run" "SELECT count(*) FROM gateway_charges" "3"
        fi
    fi
    report "example node/handler.js" "$out0" "$out1" "$out2"
}

check_java() {
    local db out0=$WORK/javac.out out1=$WORK/java-run1.out out2=$WORK/java-run2.out
    local classes=$WORK/java-classes
    local orders="SELECT string_agg(id || ':' || status || ':' || paid_total || ':' || version, ',' ORDER BY id)
                    FROM shop_orders"
    mkdir -p "$classes"
    if ! javac -Xlint:all -Werror -d "$classes" -cp "$JDBC_JAR" "$EXAMPLES/java/PaymentCallback.java" >"$out0" 2>&1; then
        problem "javac failed"
    elif new_db java && PGDATABASE=$db run_example "$out1" java -cp "$classes:$JDBC_JAR" PaymentCallback; then
        expect_sql "$db" "orders" "$orders" "42:paid:100.00:1,43:refunded:0.00:2"
        expect_sql "$db" "ledger" \
            "SELECT string_agg(event_id || ':' || order_id || ':' || amount, ',' ORDER BY event_id) FROM payment_ledger" \
            "evt_A:42:100.00,evt_B:43:100.00,evt_C:43:-100.00"
        expect_sql "$db" "status history (never backwards)" \
            "SELECT string_agg((row_key->>'id') || ':' || coalesce(from_state, '') || '>' || to_state, ',' ORDER BY id)
               FROM idem_transition_log WHERE table_name = 'public.shop_orders'" \
            "42:>pending_payment,43:>pending_payment,42:pending_payment>paid,43:pending_payment>paid,43:paid>refunded"
        expect_count "$out1" "concurrent delivery processed once" \
            '\(concurrent\) -> 200 processed: order 42 pending_payment -> paid' 1
        expect_count "$out1" "concurrent delivery recognised" '\(concurrent\) -> 200 duplicate' 1
        expect_count "$out1" "later redelivery" '^  callback evt_A payment.succeeded order 42 100.00 -> 200 duplicate' 1
        expect_count "$out1" "reused event id" 'evt_A .* 999.00 -> 422 ' 1
        expect_count "$out1" "refund before payment" 'evt_C .* -> 409 retry later' 1
        expect_count "$out1" "refund after payment" 'evt_C .* -> 200 processed: order 43 paid -> refunded' 1
        expect_count "$out1" "late event" 'evt_D .* -> 200 stale: order 43 is refunded' 1
        expect_count "$out1" "guard" 'refused by the guard \(ID004\)' 1
        # Every callback once more: nothing may change.
        if PGDATABASE=$db run_example "$out2" java -cp "$classes:$JDBC_JAR" PaymentCallback; then
            expect_count "$out2" "second run processes nothing" 'processed:' 0
            expect_count "$out2" "second run: duplicates" '-> 200 duplicate' 7
            expect_sql "$db" "orders after the second run" "$orders" "42:paid:100.00:1,43:refunded:0.00:2"
            expect_sql "$db" "ledger after the second run" "SELECT count(*) FROM payment_ledger" "3"
        fi
    fi
    report "example java/PaymentCallback.java" "$out0" "$out1" "$out2"
}

# shellcheck source=examples/http/checks.sh
. "$EXAMPLES/http/checks.sh"
# shellcheck source=examples/outbox/checks.sh
. "$EXAMPLES/outbox/checks.sh"

for c in "${checks[@]}"; do
    idem_log "examples: $c"
    "check_$c"
done

echo
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
