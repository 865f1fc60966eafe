#!/usr/bin/env bash
# Doc tests: every ```sql block of README.md and docs/*.md runs, and every
# in-repo link and #anchor of those pages resolves.
#
# Conventions (the same for every page):
#
#   ```sql            a block that runs.  The blocks of one page run in
#   ...               order in one psql session (psql as a user would run
#   ```               it: command tags printed), in a fresh database of
#                     their own, as the superuser postgres.  A block that
#                     shows no output must not raise an error or a warning.
#
# All pages run in one cluster, as a reader who follows them uses one
# server: README.md first, then the pages in the order of PAGE_ORDER below,
# then any other page of docs/ in name order.  So what a page leaves in
# the cluster (roles above all: they are not per database) is there for
# the pages after it, and a page must not create it again (CREATE ROLE app
# is the README's).
#
#   ```text           right after a ```sql block (only blank lines between):
#   ...               the exact output psql prints for that block, compared
#   ```               line by line (trailing blanks and psql's
#                     "psql:<stdin>:N: " prefix of messages ignored).
#
#   <!-- doctest: skip -->     on the line before a ```sql block: the block
#                              is not run (driver code, a fragment).  Rare.
#                              A reason may follow in parentheses:
#                              <!-- doctest: skip (needs a Citus cluster) -->
#   <!-- doctest: preload -->  anywhere in a page: the cluster runs with
#                              shared_preload_libraries = 'idempotency'
#                              for that page (it is restarted with the
#                              preload before the page, and without it
#                              before the next page that has no marker).
#   <!-- doctest: managed ROLE[@DB] [tle|plain] -->
#                              on the line before a ```sql block (and its
#                              ```text output): not run with the page, but
#                              by the managed step (below), as ROLE (admin:
#                              the provider's administrator) in database DB
#                              (default app), on both paths or the one named.
#   <!-- doctest: setup        hidden SQL, run at that point of the page
#   ...                        (output not compared, errors fail).
#   -->
#
# Other fenced blocks (```sh, ```python, ```text not after a sql block, ...)
# are not run.  Links: [text](path), [text](path#anchor) and [text](#anchor)
# outside code must name a file or directory of the checkout and, for a .md
# file, a heading of it (GitHub's anchors: lower case, punctuation dropped,
# spaces to '-', a repeated heading gets -1, -2, ...).
#
# The managed step (when docs/managed.md is among the pages): the page's
# quickstart as a user of a managed service runs it, on both paths: a
# fresh cluster from a copy of the installation without the C edition,
# pg_tle (and pg_cron, when installed) preloaded; the portable files built
# by `make portable tle` from a copy of the checkout; per path (tle: pg_tle
# registered and created by a pgtle_admin role; plain: the plain script),
# the install commands the page shows (checked to be on the page), then
# every `doctest: managed` block as its role, its output compared.  A path
# whose prerequisite is missing (pg_tle not installed) is reported skipped.
#
# On a full run, first checks itself on a page with four mistakes ("docs
# (self-test) ... ok").  Prints one line per page, "docs <page> ... ok" or
# "docs <page> ... FAILED"
# followed by what differs, then a count of the blocks, and exits non-zero
# when a page failed.
#
# Usage: bash test/scripts/doctest.sh [page.md ...]   (default: README.md docs/*.md)
# Named pages run in the same order, after README.md (which runs first
# whether named or not, as the pages assume it).  Run by
# `bash test/scripts/run.sh docs` (suite docs of make test), which provides the
# private installation; run alone, it builds one itself.
set -u
. "$(dirname "$0")/harness.sh"

# The order of the pages after README.md: that of the README's
# Documentation table (managed.md, not in it yet, before the last).  Pages
# of docs/ not listed here run after these, in name order.
PAGE_ORDER=(docs/tutorial.md docs/reference.md docs/state-machines.md docs/patterns.md
            docs/guarantees.md docs/security.md docs/operations.md
            docs/performance.md docs/citus.md docs/managed.md
            docs/troubleshooting.md)

cd "$IDEM_TOP" || exit 1
named=("$@")
[ ${#named[@]} -gt 0 ] || named=(docs/*.md)
# README.md, then the named pages in PAGE_ORDER, then the others named
# (missing files are kept, to be reported).
pages=(README.md)
for p in "${PAGE_ORDER[@]}"; do
    for n in "${named[@]}"; do
        [ "$n" = "$p" ] && { pages+=("$p"); break; }
    done
done
while IFS= read -r n; do
    [ -n "$n" ] || continue
    case " ${pages[*]} " in *" $n "*) ;; *) pages+=("$n") ;; esac
done < <(printf '%s\n' "${named[@]}" | sort)

own_work=0
if [ "${IDEM_DOCTEST_INSTALLED:-0}" != 1 ]; then
    idem_setup
    DT_WORK=$(idem_workdir)
    own_work=1
    idem_private_install "$DT_WORK"
else
    DT_WORK=$(idem_workdir)
fi
cleanup() {
    idem_cluster_stop
    if [ "${KEEP_WORK:-0}" = 1 ]; then
        echo "doctest work directory kept: $DT_WORK" >&2
    else
        rm -rf "$DT_WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ "$own_work" = 1 ] || [ -n "${IDEM_BINDIR:-}" ] || idem_die "IDEM_BINDIR is not set"

# --- the cluster ---------------------------------------------------------------
# One cluster for every page.  Its postgresql.conf includes preload.conf,
# which holds the preload line while a page with the preload marker runs.
DT_PRELOAD=off
idem_cluster_start "$DT_WORK/cluster" "include_if_exists = 'preload.conf'"
idem_as_pg touch "$IDEM_PGDATA/preload.conf"

# set_preload on|off: restart the cluster with or without the preload,
# when that changes.
set_preload() {
    [ "$1" = "$DT_PRELOAD" ] && return 0
    if [ "$1" = on ]; then
        echo "shared_preload_libraries = 'idempotency'" | idem_as_pg tee "$IDEM_PGDATA/preload.conf" >/dev/null
    else
        idem_as_pg truncate -s 0 "$IDEM_PGDATA/preload.conf"
    fi
    DT_PRELOAD=$1
    idem_as_pg pg_ctl -D "$IDEM_PGDATA" -l "$IDEM_CLUSTER_DIR/server.log" -m fast -w -t 60 restart >/dev/null
}

# --- extraction ------------------------------------------------------------
# extract PAGE OUTDIR: writes OUTDIR/NNN.sql (a block to run), NNN.kind
# ("sql LINE" or "setup LINE"), NNN.expected (its shown output, if any),
# OUTDIR/preload when the page asks for it, OUTDIR/skipped (one line per
# skipped block) and OUTDIR/errors (malformed markers).
extract() {
    awk -v out="$2" '
    function fname(n, ext) { return sprintf("%s/%03d.%s", out, n, ext) }
    function err(msg) { print FILENAME ":" FNR ": " msg > (out "/errors") }
    BEGIN { n = 0; m = 0; infence = 0; skip = 0; managed = ""; insetup = 0; last = 0; blank_since = 0 }
    {
        line = $0
        if (insetup) {
            if (line ~ /-->/) { insetup = 0; close(cur); next }
            print line > cur; next
        }
        if (infence) {
            if (line ~ /^[ \t]*```[ \t]*$/) {
                infence = 0
                if (cur != "") close(cur)
                if (mode == "sql") { last = n; blank_since = 1 }
                else if (mode == "managed") { last = -m; blank_since = 1 }
                else { last = 0 }
                cur = ""; next
            }
            if (cur != "") print line > cur
            next
        }
        if (line ~ /^[ \t]*```/) {
            lang = line; sub(/^[ \t]*```[ \t]*/, "", lang); sub(/[ \t].*$/, "", lang)
            infence = 1; cur = ""; mode = "other"
            if (lang == "sql") {
                if (skip) { print FNR > (out "/skipped"); skip = 0; mode = "skipped" }
                else if (managed != "") {
                    m++; mode = "managed"; cur = sprintf("%s/managed-%03d.sql", out, m)
                    printf "" > cur
                    print managed " " FNR > sprintf("%s/managed-%03d.kind", out, m)
                    close(sprintf("%s/managed-%03d.kind", out, m))
                    managed = ""
                }
                else {
                    n++; mode = "sql"; cur = fname(n, "sql")
                    printf "" > cur
                    print "sql " FNR > fname(n, "kind"); close(fname(n, "kind"))
                }
            } else {
                if (skip) { err("doctest: skip before a block that is not ```sql"); skip = 0 }
                if (managed != "") { err("doctest: managed before a block that is not ```sql"); managed = "" }
                if ((lang == "text" || lang == "output") && last > 0 && blank_since) {
                    mode = "expected"; cur = fname(last, "expected"); printf "" > cur
                }
                if ((lang == "text" || lang == "output") && last < 0 && blank_since) {
                    mode = "expected"; cur = sprintf("%s/managed-%03d.expected", out, -last); printf "" > cur
                }
            }
            last = 0
            next
        }
        if (line ~ /^[ \t]*$/) next
        last = 0
        if (line ~ /^<!-- *doctest: *skip( *\([^)]*\))? *-->[ \t]*$/) { skip = 1; next }
        if (skip) { err("doctest: skip not followed by a ```sql block"); skip = 0 }
        if (line ~ /^<!-- *doctest: *managed +[a-z_@]+( +(tle|plain))? *-->[ \t]*$/) {
            managed = line; sub(/^<!-- *doctest: *managed +/, "", managed); sub(/ *-->.*$/, "", managed); next
        }
        if (managed != "") { err("doctest: managed not followed by a ```sql block"); managed = "" }
        if (line ~ /^<!-- *doctest: *preload *-->[ \t]*$/) { printf "" > (out "/preload"); next }
        if (line ~ /^<!-- *doctest: *setup/) {
            n++; cur = fname(n, "sql"); printf "" > cur
            print "setup " FNR > fname(n, "kind"); close(fname(n, "kind"))
            rest = line; sub(/^<!-- *doctest: *setup[ \t]*/, "", rest)
            if (rest ~ /-->/) { sub(/-->.*/, "", rest); print rest > cur; close(cur); next }
            if (rest != "") print rest > cur
            insetup = 1; next
        }
        if (line ~ /doctest:/) err("unknown doctest marker: " line)
    }
    END {
        if (infence) err("unterminated code block")
        if (insetup) err("unterminated doctest: setup comment")
        if (skip) err("doctest: skip at the end of the page")
    }' "$1"
}

# --- links -------------------------------------------------------------------
# anchors FILE: the GitHub anchors of FILE's headings (and explicit id/name
# attributes), one per line.
anchors() {
    awk '
    /^[ \t]*```/ { infence = !infence; next }
    infence { next }
    /^#+[ \t]/ {
        h = $0
        sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h); sub(/[ \t]+$/, "", h)
        # links in headings keep their text
        while (match(h, /\[[^]]*\]\([^)]*\)/)) {
            t = substr(h, RSTART + 1, RLENGTH - 2); sub(/\]\(.*$/, "", t)
            h = substr(h, 1, RSTART - 1) t substr(h, RSTART + RLENGTH)
        }
        h = tolower(h)
        a = ""
        for (i = 1; i <= length(h); i++) {
            c = substr(h, i, 1)
            if (c ~ /[a-z0-9_-]/) a = a c
            else if (c == " ") a = a "-"
            else if (c > "\177") a = a c        # non-ASCII letters are kept
        }
        if (a in seen) print a "-" seen[a]++; else { seen[a] = 1; print a }
        next
    }
    {
        s = $0
        while (match(s, /(id|name)="[^"]+"/)) {
            v = substr(s, RSTART, RLENGTH); sub(/^[a-z]+="/, "", v); sub(/"$/, "", v)
            print v; s = substr(s, RSTART + RLENGTH)
        }
    }' "$1"
}

# links FILE: "LINE TARGET" for every inline link outside code.
links() {
    awk '
    /^[ \t]*```/ { infence = !infence; next }
    infence { next }
    {
        s = $0
        gsub(/`[^`]*`/, "", s)            # inline code is not a link
        while (match(s, /\]\([^) \t]+\)/)) {
            t = substr(s, RSTART + 2, RLENGTH - 3)
            print FNR " " t
            s = substr(s, RSTART + RLENGTH)
        }
    }' "$1"
}

# check_links PAGE: prints one line per broken link.
check_links() {
    local page=$1 dir lineno target path anchor file
    dir=$(dirname "$page")
    while read -r lineno target; do
        case "$target" in
        http://*|https://*|mailto:*) continue ;;
        esac
        path=${target%%#*}
        anchor=""
        [ "$path" = "$target" ] || anchor=${target#*#}
        if [ -z "$path" ]; then
            file=$page
        else
            file=$dir/$path
            if [ ! -e "$file" ]; then
                echo "$page:$lineno: link to $target: no such file or directory"
                continue
            fi
        fi
        if [ -n "$anchor" ]; then
            case "$file" in
            *.md)
                if ! anchors "$file" | grep -qxF -- "$anchor"; then
                    echo "$page:$lineno: link to $target: no heading with anchor #$anchor in $file"
                fi
                ;;
            esac
        fi
    done < <(links "$page")
}

# --- running -------------------------------------------------------------------
# normalise: psql's "psql:<stdin>:N: " prefix off, trailing blanks off,
# leading and trailing blank lines off.
normalise() {
    sed -E 's/^psql:<stdin>:[0-9]+: //; s/[[:space:]]+$//' | awk '
        NF { for (i = 0; i < blanks; i++) print ""; blanks = 0; started = 1; print; next }
        started { blanks++ }'
}

# What psql prints for an error or warning (a server message, or one of
# psql's own: a bad meta-command, \gset without exactly one row).
error_re='^(ERROR|WARNING|FATAL|PANIC):|^invalid command |^unterminated |^no rows returned for |^more than one row returned for |^psql: |^\\[a-z]+: '

total_run=0
total_setup=0
total_shown=0
total_skipped=0
failed_pages=0

run_page() { # page
    local page=$1 name dir script out problems kind line n f lines
    name=$(echo "$page" | tr '/.' '__')
    dir=$DT_WORK/$name
    idem_as_pg mkdir -p "$dir"
    problems=$dir/problems
    : >"$problems"
    extract "$page" "$dir"
    [ -s "$dir/errors" ] && cat "$dir/errors" >>"$problems"
    check_links "$page" >>"$problems"

    local blocks=() shown=0 skipped=0 setups=0
    for f in "$dir"/[0-9][0-9][0-9].sql; do
        [ -e "$f" ] || continue
        blocks+=("$(basename "$f" .sql)")
        grep -q '^setup' "${f%.sql}.kind" && setups=$((setups + 1))
    done
    [ -f "$dir/skipped" ] && skipped=$(wc -l <"$dir/skipped")

    if [ ${#blocks[@]} -gt 0 ]; then
        script=$dir/script.sql
        {
            echo '\set QUIET off'
            for n in "${blocks[@]}"; do
                echo "\\echo '@@doctest-block $n@@'"
                cat "$dir/$n.sql"
            done
            echo "\\echo '@@doctest-block end@@'"
        } >"$script"
        local db preload=off
        db=doctest_$(basename "$page" .md | tr -c 'a-zA-Z0-9\n' '_' | tr 'A-Z' 'a-z')
        [ -f "$dir/preload" ] && preload=on
        set_preload "$preload" || echo "could not restart the cluster (preload $preload)" >>"$problems"
        idem_psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null 2>&1 \
            || echo "could not create the database $db" >>"$problems"
        idem_psql -d "$db" -v ON_ERROR_STOP=0 <"$script" >"$dir/output" 2>&1
        # split the output at the markers
        awk -v d="$dir" '
            /^@@doctest-block [0-9]+@@$/ { if (cur) close(cur); n = $2; sub(/@@$/, "", n); cur = d "/" n ".out"; printf "" > cur; next }
            /^@@doctest-block end@@$/ { if (cur) close(cur); cur = ""; done = 1; next }
            cur { print > cur }
            !cur && !done && NF { print > (d "/preamble.out") }
        ' "$dir/output"
        grep -q '^@@doctest-block end@@$' "$dir/output" \
            || echo "the psql session ended early:"$'\n'"$(tail -n 20 "$dir/output")" >>"$problems"
        for n in "${blocks[@]}"; do
            read -r kind line <"$dir/$n.kind"
            [ -f "$dir/$n.out" ] || : >"$dir/$n.out"
            normalise <"$dir/$n.out" >"$dir/$n.got"
            if [ -f "$dir/$n.expected" ]; then
                shown=$((shown + 1))
                normalise <"$dir/$n.expected" >"$dir/$n.want"
                if ! cmp -s "$dir/$n.want" "$dir/$n.got"; then
                    {
                        echo "$page:$line: the output differs from the one shown (--- shown, +++ psql):"
                        diff -u --label shown --label psql "$dir/$n.want" "$dir/$n.got" | tail -n +3
                    } >>"$problems"
                fi
            else
                # No output shown: an error or warning is a failure.
                lines=$(normalise <"$dir/$n.out" | grep -E "$error_re")
                if [ -n "$lines" ]; then
                    {
                        echo "$page:$line: the $kind block failed:"
                        sed -E 's/^/    /' "$dir/$n.out"
                    } >>"$problems"
                fi
            fi
        done
    fi

    total_run=$((total_run + ${#blocks[@]} - setups))
    total_setup=$((total_setup + setups))
    total_shown=$((total_shown + shown))
    total_skipped=$((total_skipped + skipped))
    if [ -s "$problems" ]; then
        printf 'docs %-28s ... FAILED\n' "$page"
        sed 's/^/    /' "$problems"
        failed_pages=$((failed_pages + 1))
    else
        printf 'docs %-28s ... ok   (%d sql blocks run, %d outputs compared, %d skipped, %d hidden setup)\n' \
            "$page" "$((${#blocks[@]} - setups))" "$shown" "$skipped" "$setups"
    fi
}

# The runner checks itself first (on a full run): a page with a wrong
# output, an error where none is shown, a missing file and a missing anchor
# must fail, with each of the four named.
self_test() {
    local page=$DT_WORK/self-test.md log=$DT_WORK/self-test.log saved
    cat >"$page" <<'PAGE'
# Self test

[missing file](no-such-file.md) and [missing anchor](#no-such-heading).

```sql
SELECT 1 AS one;
```

```text
 one
-----
 2
(1 row)
```

```sql
SELECT 1/0;
```
PAGE
    [ "$(id -u)" -ne 0 ] || chown postgres: "$page"
    saved="$total_run $total_setup $total_shown $total_skipped $failed_pages"
    run_page "$page" >"$log" 2>&1
    read -r total_run total_setup total_shown total_skipped failed_pages <<<"$saved"
    if grep -q '\.\.\. FAILED' "$log" && grep -q 'no-such-file.md: no such file' "$log" &&
       grep -q 'anchor #no-such-heading' "$log" && grep -q '^    +  *1$' "$log" &&
       grep -q 'division by zero' "$log"; then
        printf 'docs %-28s ... ok\n' "(self-test)"
    else
        printf 'docs %-28s ... FAILED\n' "(self-test)"
        echo "    a page with four mistakes did not fail as it should:"
        sed 's/^/    | /' "$log"
        failed_pages=$((failed_pages + 1))
    fi
}
[ $# -gt 0 ] || self_test

for page in "${pages[@]}"; do
    [ -f "$page" ] || { printf 'docs %-28s ... FAILED\n    no such page\n' "$page"; failed_pages=$((failed_pages + 1)); continue; }
    run_page "$page"
done

# --- the managed step --------------------------------------------------------
# See the header.  MG_PAGE's install commands, as the step runs them (each
# must be on the page, word for word).
MG_PAGE=docs/managed.md
MG_TLE_CMDS=("psql -d app -v ON_ERROR_STOP=1 -f build/tle/idempotency--pgtle.sql")
MG_PLAIN_CMDS=("PGOPTIONS='-c idempotency.install_schema=idem' psql -d app -v ON_ERROR_STOP=1 -f build/portable/idempotency-portable--VERSION.sql")
managed_blocks=0

# mg_block DIR N PATH PROBLEMS: run managed block N as its role, compare.
mg_block() {
    local dir=$1 n=$2 path=$3 problems=$4 spec line role db only user out
    read -r spec only line <<<"$(sed -E 's/^([^ ]+) (tle|plain)? ?([0-9]+)$/\1 \2 \3/' "$dir/managed-$n.kind")"
    [ -n "$line" ] || { line=$only; only=; }
    [ -z "$only" ] || [ "$only" = "$path" ] || return 0
    role=${spec%@*}; db=app
    case $spec in *@*) db=${spec#*@} ;; esac
    user=$role; [ "$role" = admin ] && user=postgres
    out=$dir/managed-$n.$path.out
    { echo '\set QUIET off'; cat "$dir/managed-$n.sql"; } \
        | idem_psql -U "$user" -d "$db" -v ON_ERROR_STOP=0 >"$out" 2>&1
    managed_blocks=$((managed_blocks + 1))
    normalise <"$out" >"$out.got"
    if [ -f "$dir/managed-$n.expected" ]; then
        normalise <"$dir/managed-$n.expected" >"$dir/managed-$n.want"
        cmp -s "$dir/managed-$n.want" "$out.got" || {
            echo "$MG_PAGE:$line ($path, as $role): the output differs from the one shown (--- shown, +++ psql):"
            diff -u --label shown --label psql "$dir/managed-$n.want" "$out.got" | tail -n +3
        } >>"$problems"
    elif grep -qE "$error_re" "$out.got"; then
        { echo "$MG_PAGE:$line ($path, as $role): the block failed:"; sed -E 's/^/    /' "$out"; } >>"$problems"
    fi
}

managed_step() {
    local dir=$DT_WORK/managed-step problems c path n v libdir sharedir bindir
    local preload=pg_tle have_tle=1 have_cron=0 paths=() first_owner
    mkdir -p "$dir"; problems=$dir/problems; : >"$problems"
    extract "$MG_PAGE" "$dir"
    v=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$IDEM_TOP/idempotency.control")
    for c in "${MG_TLE_CMDS[@]}" "${MG_PLAIN_CMDS[@]}"; do
        grep -qF -- "${c//VERSION/$v}" "$MG_PAGE" || echo "$MG_PAGE: the command '${c//VERSION/$v}' that the managed step runs is not on the page" >>"$problems"
    done
    # The files, from a copy of the checkout, without pg_config.
    mkdir -p "$dir/clone"
    (cd "$IDEM_TOP" && tar --exclude=.git --exclude=./build --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
        --exclude=./results --exclude=./tmp_check --exclude=node_modules -cf - .) | tar -C "$dir/clone" -xf -
    make -C "$dir/clone" -s PG_CONFIG=/nonexistent portable tle >"$dir/build.log" 2>&1 \
        || { echo "make portable tle failed:"; cat "$dir/build.log"; } >>"$problems"
    # An installation without the C edition: pg_tle refuses an extension
    # whose control file is installed, and the plain script must not lean
    # on it either.
    bindir=$("$IDEM_PG_CONFIG" --bindir); libdir=$("$IDEM_PG_CONFIG" --pkglibdir); sharedir=$("$IDEM_PG_CONFIG" --sharedir)
    for d in "$bindir" "$libdir" "$sharedir"; do
        mkdir -p "$dir/pg$(dirname "$d")"
        [ -d "$dir/pg$d" ] || cp -a "$d" "$dir/pg$(dirname "$d")/"
    done
    rm -rf "$dir/pg$libdir"/idempotency.so "$dir/pg$libdir"/bitcode/idempotency* "$dir/pg$sharedir"/extension/idempotency*
    [ -f "$sharedir/extension/pg_tle.control" ] || { have_tle=0; preload=; }
    if [ -f "$sharedir/extension/pg_cron.control" ]; then
        have_cron=1; preload=${preload:+$preload, }pg_cron
    fi
    [ "$(id -u)" -ne 0 ] || chown -R postgres: "$dir"
    paths=(plain); [ "$have_tle" = 1 ] && paths=(tle plain)
    first_owner=$(cd "$dir" && grep -l '^app_owner' managed-*.kind 2>/dev/null | head -n 1 | sed -E 's/managed-([0-9]+)\.kind/\1/')
    [ -n "$first_owner" ] || echo "$MG_PAGE: no doctest: managed app_owner block" >>"$problems"
    idem_cluster_stop
    for path in "${paths[@]}"; do
        (
            IDEM_BINDIR=$dir/pg$bindir
            idem_cluster_start "$dir/cluster-$path" "shared_preload_libraries = '$preload'" \
                "cron.database_name = 'app'"
            mg_ok=1
            # What the provider's administrator did before the page starts:
            # the roles and the database (the page's admin blocks say so).
            for n in $(cd "$dir" && ls managed-*.sql 2>/dev/null | sed -E 's/managed-([0-9]+)\.sql/\1/'); do
                if [ "$n" = "$first_owner" ]; then
                    # Before the owner's first block: the install, per path.
                    if [ "$path" = tle ]; then
                        (cd "$dir/clone" && idem_psql -U app_owner -d app -f build/tle/idempotency--pgtle.sql) >"$dir/install-$path.log" 2>&1 || mg_ok=0
                    else
                        (cd "$dir/clone" && idem_as_pg env PGOPTIONS='-c idempotency.install_schema=idem' \
                            psql -X -q -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U app_owner -d app -v ON_ERROR_STOP=1 \
                            -f "build/portable/idempotency-portable--$v.sql") >"$dir/install-$path.log" 2>&1 || mg_ok=0
                    fi
                    [ "$mg_ok" = 1 ] || { echo "the $path install as app_owner failed:"; cat "$dir/install-$path.log"; } >>"$problems"
                fi
                if [ "$have_cron" = 0 ] && grep -qE 'pg_cron|(^|[^_a-z])cron[. ]' "$dir/managed-$n.sql"; then
                    echo "skip $n" >>"$dir/skipped-cron"; continue
                fi
                mg_block "$dir" "$n" "$path" "$problems"
            done
            echo "$managed_blocks" >"$dir/count-$path"
            idem_cluster_stop
        )
    done
    n=0; for path in "${paths[@]}"; do n=$((n + $(cat "$dir/count-$path" 2>/dev/null || echo 0))); done
    if [ -s "$problems" ]; then
        printf 'docs %-28s ... FAILED\n' "(managed quickstart)"
        sed 's/^/    /' "$problems"
        failed_pages=$((failed_pages + 1))
    else
        printf 'docs %-28s ... ok   (%d blocks run as their roles on %s%s%s)\n' "(managed quickstart)" "$n" \
            "${paths[*]}" "$([ "$have_tle" = 1 ] || echo '; tle skipped: pg_tle is not installed')" \
            "$([ "$have_cron" = 1 ] || echo '; the pg_cron blocks skipped: pg_cron is not installed')"
    fi
}
case " ${pages[*]} " in *" $MG_PAGE "*) managed_step ;; esac

echo "docs: $total_run sql blocks run ($total_shown with their output compared), $total_skipped marked skip, $total_setup hidden setup blocks, in ${#pages[@]} pages"
[ "$failed_pages" -eq 0 ]
