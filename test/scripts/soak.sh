#!/usr/bin/env bash
# `make soak` (not part of `make test`; CI does not need it): the long
# variants of the reliability suites, against throwaway clusters.
#   010_crash_recovery  6 crash rounds (postmaster and backend kills) with
#                       5 times more work before each crash
#   011_soak            SOAK_SECONDS of concurrent load (default 300)
#   012_model           30000 operations for each of SOAK_MODEL_SEEDS
#                       (default: three seeds taken from the clock,
#                       printed, so that every soak explores new sequences;
#                       rerun one with IDEM_MODEL_SEED=<seed>)
# Prints one summary line per run and exits non-zero if any failed.
set -u
cd "$(dirname "$0")/../.." || exit 1

export SOAK=1
export SOAK_SECONDS=${SOAK_SECONDS:-300}
now=$(date +%s)
seeds=${SOAK_MODEL_SEEDS:-"$now $((now + 1)) $((now + 2))"}

status=0
results=()

TAP_TESTS="test/t/010_crash_recovery.pl test/t/011_soak.pl" bash test/scripts/run.sh tap
rc=$?
results+=("crash recovery and soak: $([ $rc -eq 0 ] && echo passed || echo FAILED)")
[ $rc -eq 0 ] || status=1

for seed in $seeds; do
    echo "== model-based run with IDEM_MODEL_SEED=$seed"
    IDEM_MODEL_SEED=$seed TAP_TESTS=test/t/012_model.pl bash test/scripts/run.sh tap
    rc=$?
    results+=("model, IDEM_MODEL_SEED=$seed: $([ $rc -eq 0 ] && echo passed || echo FAILED)")
    [ $rc -eq 0 ] || status=1
done

echo
echo "== soak summary"
for r in "${results[@]}"; do echo "   $r"; done
exit $status
