#!/usr/bin/env bash
# The shape of src/: `make lint` runs it as the tool "structure"
# (LINT_TOOLS=structure bash test/scripts/lint.sh), or run it alone:
#   bash test/scripts/structure.sh [objects...]
#   STRUCTURE_GRAPH=1 bash test/scripts/structure.sh   also prints each file's
#                                              callees (file -> files)
#
# Fails (exit 1), printing what is wrong, when
#   - the files of src/ call each other in a circle: from the built objects
#     (src/*.o; built first with make when out of date), every undefined
#     symbol of one object that another object defines is an edge from the
#     first file to the second (nm -u, nm --defined-only), and any cycle of
#     that graph is printed as a.c -> b.c -> a.c;
#   - a .c file of src/ is over STRUCTURE_MAX_FILE lines (750);
#   - a function is over STRUCTURE_MAX_FUNCTION lines (80), counted from
#     the line of its name to its closing brace, in PostgreSQL's layout:
#     the return type on a line of its own, the name at column 0 on the
#     next, the closing brace alone at column 0;
#   - the shared header (STRUCTURE_SHARED_HEADER, src/idempotency.h) is
#     STRUCTURE_MAX_HEADER lines (200) or more.
# It always prints the measures: files, edges, the largest file, the
# longest function, the shared header's length.
set -u
. "$(dirname "$0")/harness.sh"

max_file=${STRUCTURE_MAX_FILE:-750}
max_function=${STRUCTURE_MAX_FUNCTION:-80}
max_header=${STRUCTURE_MAX_HEADER:-200}
shared_header=${STRUCTURE_SHARED_HEADER:-src/idempotency.h}

cd "$IDEM_TOP" || idem_die "cannot enter $IDEM_TOP"
sources=(src/*.c)
[ -e "${sources[0]}" ] || idem_die "no C sources in src/"

if [ $# -gt 0 ]; then
    objects=("$@")
else
    objects=("${sources[@]/%.c/.o}")
    if [ -z "${IDEM_PG_CONFIG:-}" ]; then
        idem_setup
    fi
    make -s PG_CONFIG="$IDEM_PG_CONFIG" "${objects[@]}" >&2 \
        || idem_die "build of src/*.o failed"
fi

status=0

# --- the file graph --------------------------------------------------------
edges=$(
    for o in "${objects[@]}"; do
        nm --defined-only -g "$o" | awk -v f="$(basename "${o%.o}").c" 'NF >= 3 { print "D", f, $3 }'
        nm -u "$o" | awk -v f="$(basename "${o%.o}").c" '{ print "U", f, $NF }'
    done | awk '
        $1 == "D" { def[$3] = $2; next }
        { use[++n] = $2 " " $3 }
        END {
            for (i = 1; i <= n; i++) {
                split(use[i], p, " ")
                if ((p[2] in def) && def[p[2]] != p[1])
                    print p[1], def[p[2]]
            }
        }' | sort -u
)
nedges=$(printf '%s\n' "$edges" | grep -c . || true)

cycles=$(printf '%s\n' "$edges" | awk '
    NF == 2 { adj[$1] = adj[$1] " " $2; node[$1] = 1; node[$2] = 1 }
    function dfs(v,    i, n, next_, k, s) {
        color[v] = 1
        stack[++depth] = v
        n = split(adj[v], next_, " ")
        for (i = 1; i <= n; i++) {
            if (color[next_[i]] == 1) {
                s = ""
                for (k = 1; k <= depth; k++)
                    if (stack[k] == next_[i] || s != "")
                        s = s stack[k] " -> "
                print "cycle: " s next_[i]
            } else if (color[next_[i]] == 0)
                dfs(next_[i])
        }
        depth--
        color[v] = 2
    }
    function reach(s, v,    i, n, next_) {
        n = split(adj[v], next_, " ")
        for (i = 1; i <= n; i++)
            if (!((s, next_[i]) in r)) {
                r[s, next_[i]] = 1
                reach(s, next_[i])
            }
    }
    END {
        for (v in node) if (color[v] == 0) dfs(v)
        # Each strongly connected component: the files of one circle.
        for (v in node) reach(v, v)
        for (v in node) {
            if (done[v] || !((v, v) in r)) continue
            s = ""
            for (u in node)
                if ((v, u) in r && (u, v) in r) { s = s " " u; done[u] = 1 }
            print "circle:" s
        }
    }')
nfiles=${#objects[@]}
if [ -n "${STRUCTURE_GRAPH:-}" ]; then
    printf '%s\n' "$edges" | awk 'NF == 2 { a[$1] = a[$1] " " $2 } END { for (f in a) print f " ->" a[f] }' | sort
fi
if [ -n "$cycles" ]; then
    printf '%s\n' "$cycles"
    echo "structure: the files of src/ call each other in a circle ($nfiles files, $nedges edges)"
    status=1
else
    echo "structure: $nfiles files, $nedges edges between them, no cycle"
fi

# --- sizes -----------------------------------------------------------------
largest=$(wc -l "${sources[@]}" | grep -v ' total$' | sort -n | tail -1 | awk '{ print $2 " (" $1 " lines)" }')
echo "structure: largest file $largest"
for f in "${sources[@]}"; do
    n=$(wc -l <"$f")
    if [ "$n" -gt "$max_file" ]; then
        echo "$f: $n lines (limit $max_file)"
        status=1
    fi
done

functions=$(awk '
    FNR == 1 { name = "" }
    name == "" && /^[A-Za-z_][A-Za-z0-9_]*\(/ && !/;[ \t]*$/ {
        name = $0; sub(/\(.*/, "", name); start = FNR; next
    }
    name != "" && /^}/ {
        print FNR - start + 1, FILENAME ":" start ": " name
        name = ""
    }' "${sources[@]}" | sort -rn)
longest=$(printf '%s\n' "$functions" | head -1 | awk '{ n = $1; $1 = ""; print substr($0, 2) " (" n " lines)" }')
echo "structure: longest function $longest"
over=$(printf '%s\n' "$functions" | awk -v max="$max_function" '$1 > max { n = $1; $1 = ""; print substr($0, 2) " is " n " lines (limit " max ")" }')
if [ -n "$over" ]; then
    printf '%s\n' "$over"
    status=1
fi

if [ -f "$shared_header" ]; then
    n=$(wc -l <"$shared_header")
    echo "structure: shared header $shared_header $n lines"
    if [ "$n" -ge "$max_header" ]; then
        echo "$shared_header: $n lines (limit: under $max_header)"
        status=1
    fi
fi

if [ "$status" -eq 0 ]; then
    echo "structure: clean"
else
    echo "structure: FAILED"
fi
exit "$status"
