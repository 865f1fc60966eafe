# Sourced by bench/run.sh (not run on its own): the report printed after
# the runs (and the profile).  Runs in run.sh's shell, on its variables and
# functions (RAW, SKIPPED, ops_per_tx, ...).
# shellcheck shell=bash
# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { # sync pair side column -> values, one a line
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v c="$4" '$1 == s && $2 == p && $3 == d { print $c }' "$RAW"
}
walop() { # sync pair side -> WAL bytes per op of each round
    local n
    n=$(ops_per_tx "$2")
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v n="$n" \
        '$1 == s && $2 == p && $3 == d && $6 > 0 { printf "%.3f\n", $7 / ($6 * n) }' "$RAW"
}
cpuop() { # sync pair side -> server CPU microseconds per op of each round
    local n
    n=$(ops_per_tx "$2")
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v n="$n" -v hz="$CLK_TCK" \
        '$1 == s && $2 == p && $3 == d && $6 > 0 { printf "%.2f\n", $13 * 1e6 / hz / ($6 * n) }' "$RAW"
}
bar_of() {
    case $1 in
        new|dup|business) echo 1.0;;
        batch|batch_stmts) echo 5;;
        scale) echo 0.7;;
        purge) echo 0.9;;
        transition) echo 0.95;;
        citus|citus_dup|citus_at|citus_at_dup|citus_at_typed) echo 0.9;;
        citus_business) echo 0.9;;
        portable_new|portable_dup) echo 0.9;;
        *) echo -;;
    esac
}
what_of() {
    outbox_pair "$1" && { outbox_what "$1"; return; }
    case $1 in
        new) echo "claims/s: idem_claim vs INSERT ON CONFLICT, new keys";;
        dup) echo "claims/s: the same, key exists";;
        business) echo "tx/s: UPDATE + INSERT guarded by the claim";;
        overhead) echo "tx/s: UPDATE + INSERT guarded by idem_claim vs unguarded (throughput kept)";;
        batch) echo "keys/s: idem_claim_many($BENCH_BATCH_KEYS) vs $BENCH_BATCH_KEYS idem_claim in 1 statement";;
        batch_stmts) echo "keys/s: idem_claim_many($BENCH_BATCH_KEYS) vs $BENCH_BATCH_KEYS statements";;
        scale) echo "claims/s: idem_claim, ${BENCH_SCALE_ROWS} live vs empty";;
        scale_sql) echo "claims/s: INSERT ON CONFLICT, ${BENCH_SCALE_ROWS} live vs empty";;
        purge) echo "claims/s: idem_claim with vs without a purge";;
        transition) echo "updates/s: idem_can_transition vs WHERE status";;
        citus) echo "claims/s through a Citus coordinator: idem_claim vs INSERT ON CONFLICT into a distributed table, new keys";;
        citus_dup) echo "claims/s through a Citus coordinator: the same, key exists";;
        citus_at) echo "claims/s through a Citus coordinator, records by a bigint shard key: idem_claim_at vs INSERT ON CONFLICT, new keys";;
        citus_at_typed) echo "claims/s through a Citus coordinator, by shard key: idem_claim_at's C function with a bigint shard key, a distributed function (delegated) vs INSERT ON CONFLICT, new keys";;
        citus_at_dup) echo "claims/s through a Citus coordinator, by shard key: the same, key exists";;
        citus_business) echo "tx/s through a Citus coordinator: claim + co-located ledger INSERT in BEGIN..COMMIT, guarded by idem_claim vs the INSERT";;
        portable_new) echo "claims/s: the portable edition's idem_claim vs INSERT ON CONFLICT, new keys (C edition: table below)";;
        portable_dup) echo "claims/s: the same, key exists";;
        portable_business) echo "tx/s: UPDATE + INSERT guarded by the portable idem_claim vs by the INSERT";;
        portable_guard) echo "updates/s: UPDATE of a table guarded by the portable idem_guard vs WHERE status = ..., unguarded";;
    esac
}

echo
echo "== idempotency benchmark"
echo "tree: $REV$([ "$DIRTY" -gt 0 ] && echo " + $DIRTY uncommitted/untracked paths")"
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo) RAM, PostgreSQL $("$IDEM_BINDIR/postgres" --version | awk '{ print $3 }'), fsync on, shared_buffers $BENCH_SHARED_BUFFERS$([ "$BENCH_PRELOAD" = 1 ] && echo ", shared_preload_libraries = idempotency")"
echo "runs: $BENCH_CLIENTS clients, ${BENCH_SECONDS} s each, $BENCH_ROUNDS rounds interleaved A,B,A,B,..., warm-up ${BENCH_WARMUP} s; medians; pgbench -M prepared"
echo "baseline: bench_claims, PRIMARY KEY (scope, key) and the columns of idem_records$([ "$BENCH_BASELINE_CHECK" = 1 ] && echo ", and its CHECK on status (BENCH_BASELINE_CHECK=1)" || echo " (no CHECK; BENCH_BASELINE_CHECK=1 adds it)")$([ "$BENCH_BASELINE_INDEX" = 1 ] && echo ", and an index on expires_at (BENCH_BASELINE_INDEX=1)" || echo "; no index on expires_at (BENCH_BASELINE_INDEX=1 adds one)")"
if [ "${CITUS_STATE:-}" = up ]; then
    echo "citus: Citus $CITUS_VERSION, a coordinator and 2 workers on this machine (shared_buffers $BENCH_CITUS_SHARED_BUFFERS each), $CITUS_SHARDS shards of idem_records distributed by $CITUS_DIST (citus_at*: by a bigint shard_key), bench_claims co-located; pgbench connects to the coordinator; WAL/op and CPU of the citus pairs: all 3 servers$([ -n "$BENCH_CITUS_CONF" ] && echo "; BENCH_CITUS_CONF: $BENCH_CITUS_CONF")"
fi
if [ -s "$RAW" ]; then
    awk -F '\t' '{ b += $8; if (min == "" || $9 < min) min = $9; if ($9 > max) max = $9; n++ }
        END { printf "load: other work on the machine took %.0f%% of its CPU on average during the runs (1-minute load average %s .. %s)\n", b / n, min, max }' "$RAW"
fi
echo
printf '%-10s %-4s %9s %9s %6s %6s %-4s %8s %8s %7s %7s %6s  %s\n' \
    pair sync "A ops/s" "B ops/s" "A/B" bar "" "WAL/op A" "WAL/op B" "CPU A" "CPU B" "B/A" "measures"
for sync in $BENCH_SYNC; do
    for pair in $BENCH_PAIRS; do
        [ -n "$(col "$sync" "$pair" A 5)" ] || continue
        n=$(ops_per_tx "$pair")
        ta=$(col "$sync" "$pair" A 5 | median)
        tb=$(col "$sync" "$pair" B 5 | median)
        wa=$(walop "$sync" "$pair" A | median)
        wb=$(walop "$sync" "$pair" B | median)
        ca=$(cpuop "$sync" "$pair" A | median)
        cb=$(cpuop "$sync" "$pair" B | median)
        bar=$(bar_of "$pair")
        read -r oa ob ratio verdict < <(awk -v a="$ta" -v b="$tb" -v n="$n" -v bar="$bar" \
            -v pair="$pair" -v wa="$wa" 'BEGIN {
                r = a / b
                v = "-"
                if (bar != "-") {
                    v = (r >= bar) ? "pass" : "FAIL"
                    if (pair == "dup" && wa + 0 > 0) v = "FAIL"
                }
                printf "%.0f %.0f %.3f %s\n", a * n, b * n, r, v }')
        printf '%-10s %-4s %9s %9s %6.3f %6s %-4s %8.1f %8.1f %7.1f %7.1f %6.3f  %s\n' \
            "$pair" "$sync" "$oa" "$ob" "$ratio" ">=$bar" "$verdict" "$wa" "$wb" "$ca" "$cb" \
            "$(awk -v a="$ca" -v b="$cb" 'BEGIN { print (a > 0) ? b / a : 0 }')" "$(what_of "$pair")"
    done
done
for s in "${SKIPPED[@]}"; do echo "$s"; done
if [ -s "$RAW" ]; then
    echo "rounds (ops/s, in the order run; others = share of the machine's CPU taken by other work):"
    for sync in $BENCH_SYNC; do
        for pair in $BENCH_PAIRS; do
            [ -n "$(col "$sync" "$pair" A 5)" ] || continue
            n=$(ops_per_tx "$pair")
            printf '  %-10s %-4s A: %s  B: %s  others: %s\n' "$pair" "$sync" \
                "$(col "$sync" "$pair" A 5 | awk -v n="$n" '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 * n }')" \
                "$(col "$sync" "$pair" B 5 | awk -v n="$n" '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 * n }')" \
                "$(awk -F '\t' -v s="$sync" -v p="$pair" '$1 == s && $2 == p { printf "%s%s%%", (k++ > 0) ? " " : "", $8 }' "$RAW")"
        done
    done
fi
# The portable pairs: three sides, P (A) the portable edition, H (B) the
# hand-written SQL, C the C edition.
if awk -F '\t' '$3 == "C" { found = 1 } END { exit !found }' "$RAW"; then
    echo
    echo "portable edition: P = portable (plain script in database bench_p), H = hand-written SQL, C = C edition;"
    echo "ops/s medians, the ratios of the medians, server CPU us/op medians (rounds interleaved P, H, C):"
    printf '  %-17s %-4s %8s %8s %8s %6s %6s %6s %7s %7s %7s\n' pair sync "P ops/s" "H ops/s" "C ops/s" "P/H" "C/H" "P/C" "CPU P" "CPU H" "CPU C"
    for sync in $BENCH_SYNC; do
        for pair in $BENCH_PAIRS; do
            [ -n "$(col "$sync" "$pair" C 5)" ] || continue
            tp=$(col "$sync" "$pair" A 5 | median); th=$(col "$sync" "$pair" B 5 | median); tc=$(col "$sync" "$pair" C 5 | median)
            cp_=$(cpuop "$sync" "$pair" A | median); ch=$(cpuop "$sync" "$pair" B | median); cc=$(cpuop "$sync" "$pair" C | median)
            awk -v pair="$pair" -v s="$sync" -v p="$tp" -v h="$th" -v c="$tc" -v cp="$cp_" -v ch="$ch" -v cc="$cc" 'BEGIN {
                printf "  %-17s %-4s %8.0f %8.0f %8.0f %6.3f %6.3f %6.3f %7.1f %7.1f %7.1f\n", pair, s, p, h, c, p / h, c / h, p / c, cp, ch, cc }'
            printf '  %-17s %-4s rounds P: %s  H: %s  C: %s\n' "" "" \
                "$(col "$sync" "$pair" A 5 | awk '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 }')" \
                "$(col "$sync" "$pair" B 5 | awk '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 }')" \
                "$(col "$sync" "$pair" C 5 | awk '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 }')"
        done
    done
fi
purge_info=$(awk -F '\t' '$2 == "purge" && $3 == "A" { print $1 ": " $10 }' "$RAW" | tr '\n' ';' | sed 's/;$//; s/;/; /g')
[ -z "$purge_info" ] || echo "purge A runs (records purged during the run, expired left): $purge_info"
echo "ops/s: claims per second (batch: keys per second; business: transactions; transition: updates),"
echo "       median over the rounds; A/B is the ratio of the medians.  WAL/op: median over the rounds"
echo "       of the WAL bytes of the run (pg_current_wal_insert_lsn before and after, minus background"
echo "       Standby records found by pg_waldump) / operations.  CPU A, CPU B: CPU microseconds per"
echo "       operation of the whole server (all its processes; pgbench excluded), median over the rounds;"
echo "       B/A > 1 means A costs the server less CPU than B.  Less sensitive to other load than ops/s."
if awk -F '\t' '$2 !~ /^citus/ { found = 1 } END { exit !found }' "$RAW"; then
    echo
    echo "WAL bytes per operation by resource manager (pg_waldump --stats, all rounds; records/op in brackets):"
    for sync in $BENCH_SYNC; do
        for pair in $BENCH_PAIRS; do
            for side in A B C; do
                [ -n "$(col "$sync" "$pair" "$side" 5)" ] || continue
                case $pair in citus*) continue;; esac   # no breakdown across nodes
                awk -F '\t' -v s="$sync" -v p="$pair" -v d="$side" -v n="$(ops_per_tx "$pair")" '
                    $1 == s && $2 == p && $3 == d {
                        ops += $6 * n; k = split($11, e, ",")
                        for (i = 1; i <= k; i++) if (e[i] != "") { split(e[i], f, ":"); c[f[1]] += f[2]; b[f[1]] += f[3] } }
                    END { line = ""; tot = 0; k = split("Heap Heap2 Btree Transaction XLOG", o, " ")
                          for (r in b) if (!(r in seen) && r != "Standby") { tot += b[r]; seen[r] = 1 }
                          for (r in b) { known = 0; for (i = 1; i <= k; i++) if (o[i] == r) known = 1
                                         if (!known) o[++k] = r }
                          for (i = 1; i <= k; i++) { r = o[i]
                              if (r != "Standby" && (r in b) && b[r] / ops >= 0.05)
                                  line = line sprintf("  %s %.1f [%.2f]", r, b[r] / ops, c[r] / ops) }
                          printf "  %-10s %-4s %s: %.1f =%s\n", p, s, d, (ops > 0) ? tot / ops : 0, line }' "$RAW"
            done
        done
    done
fi

if [ "${#load_bytes[@]}" -gt 0 ]; then
    echo
    echo "bytes per record after loading $BENCH_SCALE_ROWS records into each table (bulk insert, indexes rebuilt, VACUUM ANALYZE); $LOAD_TIME:"
    printf '  %-14s %s\n' table "bytes/record: heap + each index = total (pg_total_relation_size)"
    for e in "${load_bytes[@]}"; do
        tbl=${e%%|*}
        rest=${e#*|}
        echo "$rest" | tr ';' '\n' | awk -v t="$tbl" -v n="$BENCH_SCALE_ROWS" '
            NF == 2 { if ($1 == "total") total = $2; else if ($1 == "toast") { if ($2 > 0) parts = parts sprintf(" + toast %.1f", $2 / n) }
                      else if ($1 == "heap") parts = sprintf("heap %.1f", $2 / n) parts
                      else parts = parts sprintf(" + %s %.1f", $1, $2 / n) }
            END { printf "  %-14s %s = %.1f\n", t, parts, total / n }'
    done
fi
grown=$(for side in A B; do
    awk -F '\t' -v d="$side" '$2 == "new" && $3 == d { split($10, a, "="); split(a[2], b, "/"); if (b[2] > 0) printf "%.1f\n", b[1] / b[2] }' "$RAW" | median
done | tr '\n' ' ')
if [ -n "${grown// /}" ]; then
    read -r ga gb <<<"$grown"
    printf 'bytes per record of the tables grown by the "new" runs (random keys inserted one by one, some ten thousand rows; median over all new runs): idem_records %.1f, bench_claims %.1f\n' "$ga" "$gb"
fi

if [ "$BENCH_PROFILE" = 1 ] && [ -s "$P/summary" ]; then
    echo
    echo "== profile: CPU microseconds per operation of one backend, inclusive of callees (perf cpu-clock,"
    echo "   1 client, synchronous_commit = off; median of $BENCH_PROFILE_ROUNDS interleaved runs per variant;"
    echo "   files in $P)"
    printf '  %-28s' "variant"
    for v in $PROFILE_VARIANTS; do printf ' %11s' "$v"; done
    echo
    printf '  %-28s' "tps of the profiled runs"
    for v in $PROFILE_VARIANTS; do
        printf ' %11s' "$(awk -v v="$v" '$1 == v { print $5 }' "$P/summary" | median | awk '{ printf "%.0f", $1 }')"
    done
    echo
    for f in $PROFILE_FUNCS; do
        line=$(printf '  %-28s' "$f")
        any=0
        for v in $PROFILE_VARIANTS; do
            us=$(awk -v v="$v" '$1 == v { print $2, $3, $4 }' "$P/summary" | while read -r r n ns; do
                    awk -v f="$f" -v n="$n" -v ns="$ns" '$4 == f {
                        gsub(/%/, "", $1); printf "%.2f\n", $1 / 100 * ns / 1000 / n; exit }' "$P/$v.$r.children.txt"
                 done | median | awk 'NF { printf "%.1f", $1 }')
            [ -z "$us" ] && us=- || any=1
            line="$line $(printf ' %10s' "$us")"
        done
        [ "$any" = 0 ] || echo "$line"
    done
    echo "  (PostgresMain = all CPU of the backend per operation; '-' = not in the profile)"
    for v in $PROFILE_VARIANTS; do
        echo
        echo "-- $v (first run): CPU by object, then the top functions by self time"
        sed 's/^/   /' "$P/$v.dso.txt" | head -n 6
        sed 's/^/   /' "$P/$v.self.txt" | head -n 20
    done
fi
echo
echo "total time: $(( $(date +%s) - T0 )) s"
