#!/usr/bin/env bash
# Recovery after lease owners die: how long until a new worker holds the
# keys of dead owners, with leases bound to the owners' sessions
# (idem_begin(..., bind_to_session => true)) and without (the lease's time
# only).
#
# Each round: KEYS owner sessions (one psql each) begin one key apiece with
# a LEASE lease and stay connected (pg_sleep); then one statement
# terminates them all (pg_terminate_backend) and notes the time; one
# recovering worker then takes every key, in key order, the documented
# way: idem_begin, and on 'in_progress' idem_await(key, LEASE) and
# idem_begin again.  Printed per variant: the median, over ROUNDS rounds,
# of the time from the terminations to the last key acquired, and the
# slowest round.  bound and unbound rounds alternate.
#
# Usage: bash bench/lease_recovery.sh   (KEYS=100 LEASE='10 seconds' ROUNDS=3)
#        KEEP_WORK=1 keeps the work directory.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

KEYS=${KEYS:-100}
LEASE=${LEASE:-10 seconds}
ROUNDS=${ROUNDS:-3}
case $KEYS in ''|*[!0-9]*|0) idem_die "KEYS must be a positive integer (got '$KEYS')";; esac
case $ROUNDS in ''|*[!0-9]*|0) idem_die "ROUNDS must be a positive integer (got '$ROUNDS')";; esac

idem_setup
WORK=$(idem_workdir)
idem_work_trap
idem_private_install "$WORK"

idem_cluster_start "$WORK/cluster" "max_connections = $((KEYS + 20))"
idem_psql -d postgres -c "CREATE EXTENSION idempotency" >/dev/null || idem_die "CREATE EXTENSION failed"

# One round: prints the seconds from the terminations to the last key taken.
round() { # bind(true|false) round-number
    local bind=$1 scope="rec-$1-$2" i pids=()
    for i in $(seq 1 "$KEYS"); do
        idem_psql -d postgres -c "SELECT outcome FROM idem_begin('$scope', '$i', lease => '$LEASE', bind_to_session => $bind)" \
            -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
        pids+=($!)
    done
    idem_psql -d postgres -c "SELECT 1" >/dev/null
    until [ "$(idem_psql -d postgres -At -c "SELECT count(*) FROM idem_records WHERE scope = '$scope'")" = "$KEYS" ]; do
        sleep 0.1
    done
    idem_psql -d postgres -At -c "
        CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS at
          FROM (SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE query LIKE '%pg_sleep(3600)%' AND pid <> pg_backend_pid()) x;
        DO \$\$
        DECLARE k int; o text;
        BEGIN
            FOR k IN 1..$KEYS LOOP
                LOOP
                    SELECT outcome INTO o FROM idem_begin('$scope', k::text, lease => '1 hour');
                    EXIT WHEN o = 'acquired';
                    PERFORM idem_await('$scope', k::text, '$LEASE');
                END LOOP;
            END LOOP;
        END \$\$;
        SELECT round(extract(epoch FROM clock_timestamp() - at)::numeric, 3) FROM t0;"
    wait "${pids[@]}" 2>/dev/null || true   # the owners were terminated
}

declare -A results
for r in $(seq 1 "$ROUNDS"); do
    for bind in true false; do
        s=$(round "$bind" "$r") || idem_die "round $r ($bind) failed"
        idem_log "round $r, bind_to_session => $bind: all $KEYS keys taken over after $s s"
        results[$bind]+="$s "
    done
done

summary() { # bind label
    printf '%s\n' ${results[$1]} | sort -n | awk -v label="$2" -v keys="$KEYS" -v lease="$LEASE" '
        { v[NR] = $1 }
        END { printf "%-34s %3d keys, lease %s: median %.3f s, slowest %.3f s (%d rounds)\n",
                     label, keys, lease, v[int((NR + 1) / 2)], v[NR], NR }'
}
echo "recovery after the owners were terminated (time to the last key acquired):"
summary true  "bound (bind_to_session => true)"
summary false "unbound (the lease's time only)"
