# Sourced by bench/run.sh (not run on its own): the profile of
# BENCH_PROFILE=1.  Runs in run.sh's shell, on its variables and functions
# (WORK, S, q, pgb, log, ...).
# shellcheck shell=bash
# ---------------------------------------------------------------------------
# Profile (BENCH_PROFILE=1): perf attached to the one backend of a
# one-client pgbench run of N transactions, synchronous_commit = off, for
# idem_claim and the hand-written INSERT, new keys and duplicates.  The
# script pauses before its first transaction, so the whole run is
# recorded; perf stops when the backend exits.  cpu-clock sampling (no
# hardware counters needed), call graphs by DWARF unwinding (the server is
# stripped: static functions show as addresses, but their exported
# callers and callees are named).  The event count of cpu-clock is CPU
# nanoseconds, so every share converts to CPU microseconds per operation.
# ---------------------------------------------------------------------------
PROFILE_VARIANTS="new_claim new_insert dup_claim dup_insert"
# Functions whose inclusive cost is tabulated (those the profile can name).
PROFILE_FUNCS="PostgresMain secure_read secure_write __GI_kill StartTransactionCommand
 CommitTransactionCommand PortalStart PortalRun standard_ExecutorStart ExecInitNode
 ExecInitModifyTable ExecOpenIndices standard_ExecutorRun standard_ExecutorEnd idem_claim
 SPI_connect SPI_finish SPI_execute_plan GetCachedPlan GetTransactionSnapshot
 LockAcquireExtended ExecConstraints stringToNode ExecCheckIndexConstraints
 _bt_search heap_insert heap_finish_speculative ExecInsertIndexTuples _bt_doinsert
 XLogInsert index_fetch_heap idem_expiry timestamptz_pl_interval
 AllocSetContextCreateInternal MemoryContextDelete"
if [ "$BENCH_PROFILE" = 1 ]; then
    command -v perf >/dev/null || idem_die "perf is not installed (apt-get install linux-perf)"
    P=$WORK/profile
    mkdir -p "$P"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$P"
    q postgres -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    q bench -c "TRUNCATE idem_records, bench_claims" \
        -c "SELECT bench_load('idem_records', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "SELECT bench_load('bench_claims', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "VACUUM ANALYZE idem_records" -c "VACUUM ANALYZE bench_claims" -c "CHECKPOINT" >/dev/null \
        || idem_die "profile setup failed"
    for v in $PROFILE_VARIANTS; do
        # Calibrate: N transactions take about BENCH_PROFILE_SECONDS.
        pgb bench "$v.pgbench" 2 1 "$P/$v.calibrate" || idem_die "pgbench failed: $(tail -n 3 "$P/$v.calibrate")"
        n=$(awk -v t="$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$P/$v.calibrate")" \
            -v s="$BENCH_PROFILE_SECONDS" 'BEGIN { n = int(t * s); print (n < 1000) ? 1000 : n }')
        echo "$v $n" >>"$P/transactions"
        { printf '\\if :started = 0\n\\sleep 2 s\n\\set started 1\n\\endif\n'; cat "$S/$v.pgbench"; } >"$S/profile_$v.pgbench"
        [ "$(id -u)" -ne 0 ] || chown postgres: "$S/profile_$v.pgbench"
    done
    for r in $(seq 1 "$BENCH_PROFILE_ROUNDS"); do
        for v in $PROFILE_VARIANTS; do
            n=$(awk -v v="$v" '$1 == v { print $2 }' "$P/transactions")
            f=$P/$v.$r
            log "profiling $v, round $r: $n transactions, 1 client"
            idem_as_pg pgbench -n -M prepared -c 1 -t "$n" -D started=0 -D dup_rows="$BENCH_DUP_ROWS" \
                -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -f "$S/profile_$v.pgbench" bench \
                >"$f.pgbench.out" 2>&1 &
            pg_pid=$!
            backend=""
            for _ in $(seq 1 100); do
                backend=$(q bench -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
                [ -n "$backend" ] && break
                sleep 0.02
            done
            [ -n "$backend" ] || idem_die "no pgbench backend to profile"
            perf record -q -e cpu-clock -F 700 --call-graph dwarf,8192 -p "$backend" \
                -o "$f.data" >"$f.perf.log" 2>&1
            wait "$pg_pid"
            pgb_ok "$f.pgbench.out" || idem_die "pgbench failed while profiling $v"
            perf report -i "$f.data" --children --sort symbol --stdio -g none >"$f.report" 2>/dev/null
            ns=$(sed -n 's/^# Event count (approx.): //p' "$f.report")
            grep -E '^ +[0-9]' "$f.report" >"$f.children.txt"
            echo "$v $r $n $ns $(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$f.pgbench.out")" >>"$P/summary"
            if [ "$r" = 1 ]; then
                perf report -i "$f.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
                    | grep -E '^ +[0-9]' | head -n 40 >"$P/$v.self.txt"
                perf report -i "$f.data" --no-children --sort dso --stdio -g none 2>/dev/null \
                    | grep -E '^ +[0-9]' >"$P/$v.dso.txt"
            fi
        done
    done
fi

