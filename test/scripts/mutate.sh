#!/usr/bin/env bash
# `make mutate`: how many seeded bugs the test suites catch.  Each mutant of
# test/mutants/mutants.txt (one small, realistic bug) is applied alone to a
# copy of the checkout, and the suites run against it (default: every
# suite but lint, which looks for another kind of mistake); a mutant is
# caught when they fail.  Prints one line per mutant and the score.  Not a
# test itself: it takes about two to three minutes a mutant.
#
#   MUTATE_SUITES="regress isolation tap examples docs"   the suites to run
#   MUTATE_ONLY="3 7"                                    only these mutants (1-based)
set -u
. "$(dirname "$0")/harness.sh"

suites=${MUTATE_SUITES:-regress isolation tap examples docs}
list=$IDEM_TOP/test/mutants/mutants.txt
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-mutate.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Split the list into one file per mutant: header, old text, new text.
python3 - "$list" "$work" <<'PY' || idem_die "cannot read $list"
import sys, re
text = open(sys.argv[1]).read()
blocks = [b for b in re.split(r'\n\s*\n', text) if b.strip() and not b.lstrip().startswith('#')]
for n, b in enumerate(blocks, 1):
    lines = b.split('\n')
    head = lines[0]
    body = lines[1:]
    half = len(body) // 2
    open(f"{sys.argv[2]}/m{n}.head", "w").write(head)
    open(f"{sys.argv[2]}/m{n}.old", "w").write('\n'.join(body[:half]) + '\n')
    open(f"{sys.argv[2]}/m{n}.new", "w").write('\n'.join(body[half:]) + '\n')
PY
total=$(ls "$work"/m*.head | wc -l)
caught=0 survived=0 skipped=0
for n in $(seq 1 "$total"); do
    if [ -n "${MUTATE_ONLY:-}" ] && ! grep -qw "$n" <<<"$MUTATE_ONLY"; then continue; fi
    head=$(cat "$work/m$n.head")
    file=${head%% |*}
    tree=$work/tree$n
    mkdir -p "$tree"
    (cd "$IDEM_TOP" && git ls-files -z | xargs -0 cp --parents -a -t "$tree")
    if ! python3 - "$tree/$file" "$work/m$n.old" "$work/m$n.new" <<'PY'
import sys
path, old, new = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
src = open(path).read()
if src.count(old) != 1:
    sys.exit(1)
open(path, "w").write(src.replace(old, new))
PY
    then
        echo "mutant $n ... does not apply: $head"
        skipped=$((skipped + 1)); rm -rf "$tree"; continue
    fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if bash "$tree/test/scripts/run.sh" $suites >"$work/m$n.log" 2>&1; then
        result=SURVIVED; survived=$((survived + 1))
    else
        result=caught; caught=$((caught + 1))
    fi
    echo "mutant $n ... $result ($(( $(date +%s) - t0 )) s, $(grep -E '^[0-9]+ passed' "$work/m$n.log" | tail -n 1)): $head"
    rm -rf "$tree"
done
echo
echo "caught $caught of $((caught + survived)) mutants ($skipped did not apply)"
