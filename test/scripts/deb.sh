#!/usr/bin/env bash
# Test the Debian package: build it with `make deb` from a clean copy of the
# checkout, install it with apt-get, use it in a throwaway cluster, remove
# and purge it, and check that none of its files is left behind.
#
#   deb versions     debian/changelog's upstream version is default_version
#                    in idempotency.control; META.json's PostgreSQL range
#                    is the one debian/pgversions and the Makefile allow
#   deb build        `make deb` in a copy of the checkout (git ls-files)
#   deb tree clean   the copy holds nothing new but build/deb/*
#   deb make after   a plain `make` still works in that copy afterwards
#   deb install      apt-get install ./build/deb/postgresql-15-idempotency_*.deb
#   deb depends      the package depends on postgresql-15
#   deb create       CREATE EXTENSION idempotency (at default_version)
#   deb claim        idem_claim('s','k') gives t, then f
#   deb remove       apt-get remove, then dpkg --purge
#   deb no leftovers no file of `dpkg -L` (captured before removal) is left,
#                    and nothing named idempotency* in PostgreSQL 15's dirs
#
# Debian only, as root (it installs packages and writes PostgreSQL 15's
# system directories).  Installs, after apt-get update, whichever of these
# are missing: build-essential dpkg-dev fakeroot debhelper
# postgresql-server-dev-all postgresql-15 git make.  The cluster runs as the
# postgres OS user, in a temporary directory with its own socket directory
# and port.
#
# Files of an earlier `make install` in /usr/lib/postgresql/15/lib or
# /usr/share/postgresql/15/extension (not owned by any package) would hide
# leftovers and be overwritten by the package: they are moved aside first
# (said so on stderr), and put back at the end, whatever happens.  If the
# package itself is installed already, the test stops without touching it.
#
# Prints "deb <check> ... ok" or "... FAILED" per check and ends with
# "N passed, N failed"; exits non-zero when a check failed.
# KEEP_WORK=1 keeps the work directories.
set -u
. "$(dirname "$0")/harness.sh"

PKG=postgresql-15-idempotency
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
DEPS="build-essential dpkg-dev fakeroot debhelper postgresql-server-dev-all postgresql-15 git make"

if [ "$(id -u)" -ne 0 ] || ! command -v dpkg >/dev/null || ! command -v apt-get >/dev/null; then
    echo "test/scripts/deb.sh needs Debian (12) and root: it installs build dependencies" >&2
    echo "($DEPS)," >&2
    echo "installs and removes the package $PKG, and runs a cluster as postgres." >&2
    echo "Run it as root: sudo bash test/scripts/deb.sh" >&2
    exit 1
fi

passed=0
failed=0
t_start=$(date +%s)
pkg_status() { dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || echo not-installed; }
ok()   { echo "deb $1 ... ok${2:+ ($2)}"; passed=$((passed + 1)); }
fail() { echo "deb $1 ... FAILED${2:+: $2}"; failed=$((failed + 1)); }
finish() {
    echo "deb: $(( $(date +%s) - t_start )) s in all" >&2
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
missing=$(idem_missing_packages $DEPS)
idem_log "apt-get update"
apt-get update -qq >&2 || idem_die "apt-get update failed"
if [ -n "$missing" ]; then
    idem_log "installing the build dependencies:$([ -n "$missing" ] && echo " $missing")"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2 || idem_die "apt-get install failed"
else
    idem_log "build dependencies already installed: $DEPS"
fi

if [ "$(pkg_status)" != not-installed ]; then
    echo "$PKG is installed already ($(pkg_status) $(dpkg-query -W -f='${Version}' "$PKG")); this test installs and" >&2
    echo "removes it, so it stops here. Remove it first: apt-get remove $PKG; dpkg --purge $PKG" >&2
    exit 1
fi

# The cluster runs Debian's PostgreSQL 15 itself (whose lib and share
# directories the package installs into), not a private copy; idem_as_pg
# and idem_cluster_start take its programs from IDEM_BINDIR.
[ -x "$PG15_CONFIG" ] || idem_die "$PG15_CONFIG not found (postgresql-server-dev-15)"
IDEM_PG_CONFIG=$PG15_CONFIG
IDEM_BINDIR=$("$PG15_CONFIG" --bindir)
export IDEM_PG_CONFIG IDEM_BINDIR

LIBDIR=$("$PG15_CONFIG" --pkglibdir)
EXTDIR=$("$PG15_CONFIG" --sharedir)/extension
system_files() { # files and directories of idempotency in PostgreSQL 15's system directories
    find "$LIBDIR" "$EXTDIR" -maxdepth 2 \( -name 'idempotency*' -o -path '*/bitcode/idempotency*' \) 2>/dev/null | sort
}

SRC=$(mktemp -d /tmp/idempotency-deb.XXXXXX)
chmod 755 "$SRC"    # apt's _apt user reads the .deb from here
ASIDE=$SRC/aside    # files of an earlier `make install`, put back at the end
WORK=""
installed_by_us=0
moved=()

cleanup() {
    idem_cluster_stop
    if [ "$installed_by_us" = 1 ] && [ "$(pkg_status)" != not-installed ]; then
        idem_log "removing $PKG"
        apt-get remove -y -qq "$PKG" >&2; dpkg --purge "$PKG" >&2
    fi
    local f keep=${KEEP_WORK:-0}
    for f in "${moved[@]}"; do
        idem_log "putting back $f (from the earlier make install)"
        mv "$ASIDE$f" "$f" || { echo "error: could not put back $f: it is in $ASIDE$f" >&2; keep=1; }
    done
    if [ "$keep" = 1 ]; then
        echo "work directories kept: $SRC ${WORK:-}" >&2
    else
        rm -rf "$SRC" ${WORK:+"$WORK"}
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# An earlier `make install` (files no package owns): move it aside, so that
# the checks below see only the package's files, and restore it in cleanup.
stray=$(system_files)
if [ -n "$stray" ]; then
    idem_log "idempotency files from an earlier make install are in the PostgreSQL 15 directories;"
    idem_log "moving them aside to $ASIDE for the test (they are put back at the end):"
    while read -r f; do
        if dpkg -S "$f" >/dev/null 2>&1; then
            idem_die "$f belongs to the package $(dpkg -S "$f" | cut -d: -f1); remove that first"
        fi
        idem_log "  $f"
        mkdir -p "$ASIDE$(dirname "$f")"
        mv "$f" "$ASIDE$f" || idem_die "cannot move $f aside"
        moved+=("$f")
    done <<<"$stray"
fi

# --- versions agree
cd "$IDEM_TOP" || idem_die "cannot enter $IDEM_TOP"
ctl_version=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" idempotency.control)
deb_version=$(dpkg-parsechangelog -l debian/changelog -S Version)
meta_range=$(perl -MJSON::PP -0777 -ne 'print decode_json($_)->{prereqs}{runtime}{requires}{PostgreSQL}' META.json)
pg_lo=$(grep -E '^[0-9]+$' debian/pgversions | sort -n | head -1)
pg_hi=$(grep -E '^[0-9]+$' debian/pgversions | sort -n | tail -1)
why=""
[ "${deb_version%-*}" = "$ctl_version" ] ||
    why="debian/changelog is at $deb_version, idempotency.control at $ctl_version (add an entry $ctl_version-1)"
[ "$meta_range" = ">= $pg_lo.0.0, < $((pg_hi + 1)).0.0" ] ||
    why="${why:+$why; }META.json requires PostgreSQL '$meta_range', debian/pgversions lists $pg_lo to $pg_hi"
[ "$pg_lo" = "$IDEM_PG_MAJOR_MIN" ] && [ "$pg_hi" = "$IDEM_PG_MAJOR_MAX" ] ||
    why="${why:+$why; }debian/pgversions lists $pg_lo to $pg_hi, the harness supports $IDEM_PG_MAJOR_MIN to $IDEM_PG_MAJOR_MAX"
if [ -z "$why" ]; then ok "versions" "$deb_version, PostgreSQL $meta_range"; else fail "versions" "$why"; fi

# --- build from a clean copy of the checkout
copy=$SRC/idempotency
mkdir -p "$copy"
if git -C "$IDEM_TOP" rev-parse --git-dir >/dev/null 2>&1; then
    (git -C "$IDEM_TOP" ls-files -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -C "$copy" -xf - || idem_die "copying the checkout failed"
else
    tar --exclude=./.git --exclude=./build --exclude='*.o' --exclude='*.bc' --exclude='*.so' -cf - . |
        tar -C "$copy" -xf - || idem_die "copying the checkout failed"
fi
(cd "$copy" && find . | sort) >"$SRC/tree.before"
t0=$(date +%s)
if make -C "$copy" deb >"$SRC/build.log" 2>&1; then
    ok "build" "make deb, $(( $(date +%s) - t0 )) s: $(cd "$copy" && ls build/deb/*.deb | tr '\n' ' ' | sed 's/ $//')"
else
    tail -40 "$SRC/build.log"
    fail "build" "make deb failed (log above)"
    finish
fi
(cd "$copy" && find . | grep -v '^\./build/deb\(/\|$\)' | grep -vx '\./build' | sort) >"$SRC/tree.after"
if diff -u "$SRC/tree.before" "$SRC/tree.after" >"$SRC/tree.diff"; then
    ok "tree clean"
else
    cat "$SRC/tree.diff"
    fail "tree clean" "make deb left files in the tree (diff above)"
fi
if make -C "$copy" -s PG_CONFIG="$PG15_CONFIG" >"$SRC/make.log" 2>&1; then
    ok "make after"
else
    tail -20 "$SRC/make.log"
    fail "make after" "make failed after make deb"
fi

debs=("$copy"/build/deb/"$PKG"_*.deb)
if [ ! -f "${debs[0]}" ] || [ ${#debs[@]} -ne 1 ]; then
    fail "install" "expected one build/deb/${PKG}_*.deb, found: ${debs[*]}"
    finish
fi

# --- install
installed_by_us=1
if (cd "$copy" && apt-get install -y -qq "./build/deb/$(basename "${debs[0]}")") >"$SRC/install.log" 2>&1 &&
   [ "$(dpkg-query -W -f='${Version}' "$PKG" 2>/dev/null)" = "$deb_version" ]; then
    ok "install" "$PKG $deb_version"
else
    cat "$SRC/install.log"
    fail "install" "apt-get install failed or did not install $deb_version"
    finish
fi
depends=$(dpkg-query -W -f='${Depends}' "$PKG")
if echo "$depends" | grep -qE '(^|, )postgresql-15( |,|$)'; then ok "depends" "$depends"; else fail "depends" "Depends: $depends"; fi
dpkg -L "$PKG" | sort >"$SRC/dpkg-L"

# --- use it
WORK=$(idem_workdir)
idem_cluster_start "$WORK"
if idem_psql -c 'CREATE EXTENSION idempotency' >"$SRC/create.out" 2>&1 &&
   v=$(idem_psql -At -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") &&
   [ "$v" = "$ctl_version" ]; then
    ok "create" "extversion $v"
else
    cat "$SRC/create.out"
    fail "create" "CREATE EXTENSION failed or the version is not $ctl_version (${v:-none})"
fi
c1=$(idem_psql -At -c "BEGIN" -c "SELECT idem_claim('s','k')" -c "COMMIT" 2>&1)
c2=$(idem_psql -At -c "BEGIN" -c "SELECT idem_claim('s','k')" -c "COMMIT" 2>&1)
if [ "$c1" = t ] && [ "$c2" = f ]; then ok "claim" "t then f"; else fail "claim" "got '$c1' then '$c2', not t then f"; fi
idem_cluster_stop

# --- remove and purge (apt-get purge cannot find a package that came from a
# file once it is removed; dpkg --purge drops whatever state is left)
if apt-get remove -y -qq "$PKG" >"$SRC/remove.log" 2>&1 && [ "$(pkg_status)" != installed ] &&
   dpkg --purge "$PKG" >>"$SRC/remove.log" 2>&1 && [ "$(pkg_status)" = not-installed ]; then
    installed_by_us=0
    ok "remove"
else
    cat "$SRC/remove.log"
    fail "remove" "apt-get remove/purge failed"
fi
left=""
while read -r f; do
    [ -n "$f" ] && [ "$f" != /. ] || continue
    if [ -d "$f" ] && [ ! -L "$f" ]; then
        # A directory shared with other packages (/usr/lib/postgresql/15/lib ...) stays.
        dpkg -S "$f" >/dev/null 2>&1 || left="$left $f"
    elif [ -e "$f" ] || [ -L "$f" ]; then
        left="$left $f"
    fi
done <"$SRC/dpkg-L"
left="$left $(system_files | tr '\n' ' ')"
left=$(echo "$left" | xargs -n1 2>/dev/null | sort -u | tr '\n' ' ' | sed 's/ $//')
if [ -z "$left" ]; then
    ok "no leftovers" "$(wc -l <"$SRC/dpkg-L") paths of dpkg -L checked"
else
    fail "no leftovers" "still there: $left"
fi

finish
