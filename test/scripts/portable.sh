#!/usr/bin/env bash
# `make test-portable`: the portable edition (SQL and PL/pgSQL; docs/managed.md)
# on PostgreSQL 15 without the C edition, through the plain script and
# through pg_tle, and its catalog against the C edition's; with
# PORTABLE_PG_CONFIG=/var/cache/idempotency/pg19/bin/pg_config, on 19 as the
# plain script (pg_tle 1.5.3 stops at 18).  Steps:
#   build     `make portable tle dbdev` in a copy of the checkout with no
#             pg_config (PG_CONFIG=/nonexistent): what a fresh clone does
#   tle       pg_tle (../shared/pg_tle, built into the 15 as root when it is
#             missing) preloaded; a role in pgtle_admin without superuser
#             registers build/tle/idempotency--pgtle.sql, creates the
#             extension, grants an application role, which claims
#   template1 (pg_tle) pg_tle and the registration in template1 too, as a
#             provider's template would have them, so that a test that
#             creates a database of its own can CREATE EXTENSION there
#   pg_cron   Debian's postgresql-NN-cron, installed as root (apt-get update
#             first) when missing; not root: says what to install, and the
#             pg_cron test is skipped; not Debian's PostgreSQL: skipped
#   (copy)    the servers run from a private copy of the installation
#             without the C edition's files, so that no test's CREATE
#             EXTENSION gets the C edition and pg_tle works beside it
#   regress   every test/sql test not listed as `regress NAME` in
#             sql/portable/exceptions.txt, against the plain script (in
#             public) and against the pg_tle extension (created by the
#             pgtle_admin role); expected output from expected/, overlaid by
#             test/portable/expected/ (each file listed there with its reason),
#             and for the plain script by test/portable/expected-plain/;
#             and the portable edition's own tests, test/portable/sql
#   isolation every test/specs spec not listed as `isolation NAME`, the same
#             two ways
#   upgrade   a synthetic next release (patch version + 1) made in a copy of
#             the clone: a function and a configuration table added to the
#             shared sources and as sql/portable/upgrade/idempotency--V--NEXT.sql;
#             generate.pl refuses an upgrade past default_version, and a
#             released one (in SHA256SUMS) edited; pg_tle:
#             V registered and created, NEXT's file run, ALTER EXTENSION
#             UPDATE gives NEXT with the records and a fresh NEXT's catalog,
#             NEXT's file run again only notices, V's file refuses to run
#             where NEXT is registered;
#             plain script: the upgrade records NEXT, gives a fresh NEXT's
#             catalog, and refuses a schema at NEXT, one without the
#             objects and no schema named
#   dbdev     (pg_tle) build/dbdev/idempotency registered as dbdev.install
#             does, created as "test@idempotency", used, updated to NEXT
#   parity    test/portable/catalog.sql on the C edition (built into a
#             private copy of the installation, as `make test` does), the
#             pg_tle edition and the plain script: every difference must be
#             listed in sql/portable/exceptions.txt (`catalog OBJECT`, the
#             functions of `omit-function` lines, `catalog-attribute` lines
#             name what is not compared), and every `catalog` line must
#             still be needed
#   tap       test/portable/t/*.pl (prove): 001 a database of the pg_tle
#             edition dumped and restored into the C edition, which
#             continues it (needs pg_tle); 002 idem_purge scheduled with
#             pg_cron as docs/managed.md says (needs pg_cron); a test
#             without what it needs is counted skipped
# The installation is Debian's PostgreSQL 15 (PORTABLE_PG_CONFIG names
# another); the servers run from a private copy of it without the C
# edition (pg_tle refuses to register an extension whose control file
# exists).  Without the pg_tle
# source (a user's clone has no ../shared) the pg_tle steps are reported
# skipped.  Errors raised by a RAISE of the portable functions carry one
# more CONTEXT line, which test/portable/context_filter.pl removes.
# Ends with "N passed, N failed[, N skipped]" as test/scripts/run.sh; KEEP_WORK=1
# keeps the work directory.
set -u
. "$(dirname "$0")/harness.sh"

PG_CONFIG=${PORTABLE_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG
PGTLE_SRC=${PGTLE_SRC:-$IDEM_TOP/../shared/pg_tle}
T0=$(date +%s)

idem_setup
SYS_BINDIR=$IDEM_BINDIR
SHAREDIR=$("$IDEM_PG_CONFIG" --sharedir)
EXCEPTIONS=$IDEM_TOP/sql/portable/exceptions.txt

WORK=$(idem_workdir)
idem_work_trap

passed=0; failed=0; skipped=0
summary=(); failures=(); skips=()
record() { # step pass fail [skip]
    passed=$((passed + $2)); failed=$((failed + $3)); skipped=$((skipped + ${4:-0}))
    summary+=("$(printf '%-24s %3d passed, %3d failed, %d skipped' "$1" "$2" "$3" "${4:-0}")")
}
ok() { record "$1" 1 0; }
bad() { record "$1" 0 1; failures+=("$1: $2"); echo "FAILED: $1: $2" >&2; }
skip() { record "$1" 0 0 1; skips+=("$1: $2"); echo "skipped: $1: $2" >&2; }

listed() { # kind -> the objects of that kind in exceptions.txt
    awk -v k="$1" '$1 == k { print $2 }' "$EXCEPTIONS"
}

# --- build: a fresh clone's `make portable tle`, without pg_config ---------
idem_log "step build"
mkdir -p "$WORK/clone"
(cd "$IDEM_TOP" && tar --exclude=.git --exclude=./build --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
    --exclude=./results --exclude=./tmp_check --exclude=node_modules -cf - .) | tar -C "$WORK/clone" -xf -
if make -C "$WORK/clone" -s PG_CONFIG=/nonexistent portable tle dbdev >"$WORK/build.log" 2>&1; then
    ok build
else
    cat "$WORK/build.log" >&2
    bad build "make portable tle dbdev failed"
    echo "$passed passed, $failed failed"
    exit 1
fi
V=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$IDEM_TOP/idempotency.control")
PLAIN=$WORK/clone/build/portable/idempotency-portable--$V.sql
TLE=$WORK/clone/build/tle/idempotency--pgtle.sql

# Stage what the postgres OS user reads: the tests, the expected output
# overlaid by the portable edition's own, the scripts.
mkdir -p "$WORK/src"
cp -a "$IDEM_TOP/test" "$IDEM_TOP/expected" "$WORK/src/"
cp "$IDEM_TOP"/test/portable/expected/*.out "$WORK/src/expected/" 2>/dev/null || true
# behaviour permission-hint (exceptions.txt): no hint naming idem_grant.
sed -i "/^HINT:  As the extension's owner, run: SELECT idem_grant(/d" "$WORK"/src/expected/*.out
# The portable edition's own tests (test/portable/sql, their expected
# output in test/portable/expected), run with the others.
cp "$IDEM_TOP"/test/portable/sql/*.sql "$WORK/src/test/sql/" 2>/dev/null || true
# The plain script's: the same, overlaid by test/portable/expected-plain/.
cp -a "$WORK/src" "$WORK/src-plain"
cp "$IDEM_TOP"/test/portable/expected-plain/*.out "$WORK/src-plain/expected/" 2>/dev/null || true
cp "$PLAIN" "$TLE" "$WORK/"
PLAIN=$WORK/$(basename "$PLAIN"); TLE=$WORK/$(basename "$TLE")
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK"

# --- pg_tle: installed, or built from ../shared/pg_tle as root -------------
have_tle=0; tle_why=
if [ -f "$SHAREDIR/extension/pg_tle.control" ]; then
    have_tle=1
elif [ "$IDEM_PG_MAJOR" -gt 18 ]; then
    tle_why="pg_tle 1.5.3 supports PostgreSQL 12 to 18, this is $IDEM_PG_MAJOR: the plain script only"
elif [ ! -f "$PGTLE_SRC/build.sh" ]; then
    tle_why="the pg_tle source is absent ($PGTLE_SRC, see docs/managed.md)"
elif [ "$(id -u)" -ne 0 ]; then
    tle_why="pg_tle is not installed in $SHAREDIR and only root builds it here (PG_CONFIG=$IDEM_PG_CONFIG $PGTLE_SRC/build.sh)"
else
    # gssapi/gssapi.h (libkrb5-dev) is needed by the server headers pg_tle includes.
    idem_install_packages build-essential libkrb5-dev
    idem_log "building pg_tle into $(dirname "$SHAREDIR")"
    if PG_CONFIG=$IDEM_PG_CONFIG bash "$PGTLE_SRC/build.sh" >&2; then have_tle=1; else
        bad pg_tle "building pg_tle from $PGTLE_SRC failed"; fi
fi
[ "$have_tle" = 1 ] || [ -z "$tle_why" ] || skip pg_tle "$tle_why"

# --- pg_cron: Debian's postgresql-NN-cron (root installs it when missing) ----
have_cron=0; cron_why=
if [ -f "$SHAREDIR/extension/pg_cron.control" ]; then
    have_cron=1
elif [ "$IDEM_PG_CONFIG" != "/usr/lib/postgresql/$IDEM_PG_MAJOR/bin/pg_config" ]; then
    cron_why="pg_cron is not installed in $SHAREDIR, and Debian's postgresql-$IDEM_PG_MAJOR-cron installs into Debian's own PostgreSQL only"
elif [ "$(id -u)" -ne 0 ]; then
    cron_why="postgresql-$IDEM_PG_MAJOR-cron is missing; as root: apt-get update && apt-get install -y postgresql-$IDEM_PG_MAJOR-cron"
else
    idem_log "running as root: installing postgresql-$IDEM_PG_MAJOR-cron (apt-get update, apt-get install)"
    if DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "postgresql-$IDEM_PG_MAJOR-cron" >&2 &&
       [ -f "$SHAREDIR/extension/pg_cron.control" ]; then
        have_cron=1
    else
        bad pg_cron "installing postgresql-$IDEM_PG_MAJOR-cron failed"
    fi
fi
[ "$have_cron" = 1 ] || [ -z "$cron_why" ] || skip pg_cron "$cron_why"

# The servers run from a private copy of the installation without the C
# edition's files (as idem_private_install makes), so that no test that
# runs CREATE EXTENSION can get the C edition unnoticed, and pg_tle (which
# refuses to register an extension whose control file exists) works where
# the C edition is installed too.
if true; then
    idem_log "a private copy of the installation, without the C edition"
    for d in "$IDEM_BINDIR" "$("$IDEM_PG_CONFIG" --pkglibdir)" "$SHAREDIR"; do
        mkdir -p "$WORK/pg$(dirname "$d")"
        [ -d "$WORK/pg$d" ] || cp -a "$d" "$WORK/pg$(dirname "$d")/" || idem_die "copying $d failed"
    done
    rm -rf "$WORK/pg$("$IDEM_PG_CONFIG" --pkglibdir)"/idempotency.so "$WORK/pg$("$IDEM_PG_CONFIG" --pkglibdir)"/bitcode/idempotency* \
           "$WORK/pg$SHAREDIR"/extension/idempotency*
    IDEM_BINDIR=$WORK/pg$IDEM_BINDIR; SYS_BINDIR=$IDEM_BINDIR
    export IDEM_BINDIR
fi

if [ "$have_tle" = 1 ]; then
    idem_cluster_start "$WORK/cluster" "shared_preload_libraries = 'pg_tle'"
else
    idem_cluster_start "$WORK/cluster"
fi

# make_db NAME plain|tle: a database with the portable edition in schema
# SCHEMA (default public).  tle: pg_tle created by the superuser (as a
# managed service's admin does), everything else by idem_tle_admin.
idem_psql -c "CREATE ROLE idem_tle_admin LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" >/dev/null
make_db() { # name edition [schema]
    local db=$1 ed=$2 schema=${3:-public}
    if [ "$ed" = plain ]; then
        idem_psql -c "CREATE DATABASE $db" &&
        idem_as_pg env PGOPTIONS="-c idempotency.install_schema=$schema" \
            psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$db" -f "$PLAIN"
    elif [ "$ed" = tle-template0 ]; then
        # From scratch: what a user does in a database of a managed service.
        idem_psql -c "CREATE DATABASE $db OWNER idem_tle_admin TEMPLATE template0" &&
        idem_psql -d "$db" -c "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO idem_tle_admin" &&
        idem_psql -U idem_tle_admin -d "$db" -f "$TLE" >/dev/null &&
        idem_psql -U idem_tle_admin -d "$db" -c "CREATE SCHEMA IF NOT EXISTS $schema" \
            -c "CREATE EXTENSION idempotency SCHEMA $schema"
    else
        # template1 has pg_tle and the registration (step template1).
        idem_psql -c "CREATE DATABASE $db OWNER idem_tle_admin" &&
        idem_psql -U idem_tle_admin -d "$db" -c "CREATE SCHEMA IF NOT EXISTS $schema" \
            -c "CREATE EXTENSION idempotency SCHEMA $schema"
    fi
}

# --- tle: a non-superuser registers, creates, grants; the app claims ---------
if [ "$have_tle" = 1 ]; then
    idem_log "step tle (non-superuser)"
    if make_db idem_tle_smoke tle-template0 idem >"$WORK/tle.log" 2>&1 &&
       idem_psql -c "CREATE ROLE idem_tle_app LOGIN" >>"$WORK/tle.log" 2>&1 &&
       got=$(idem_psql -At -U idem_tle_admin -d idem_tle_smoke \
                -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user" \
                -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'" \
                -c "SELECT idem.idem_grant('idem_tle_app')" 2>>"$WORK/tle.log") &&
       got2=$(idem_psql -At -U idem_tle_app -d idem_tle_smoke -f - 2>>"$WORK/tle.log" <<'EOF'
SET search_path = idem;
BEGIN;
SELECT idem_claim('smoke', 'k1') AS first, idem_claim('smoke', 'k1') AS again;
COMMIT;
SELECT outcome, token IS NOT NULL FROM idem_begin('smoke', 'job');
SELECT idem_finish('smoke', 'job', (SELECT token FROM idem_records WHERE key = 'job'), '{"ok": 1}');
SELECT outcome, result FROM idem_begin('smoke', 'job');
EOF
       ) &&
       [ "$got" = "$(printf 'f\n%s\n' "$V")" ] &&
       [ "$got2" = "$(printf 't|f\nacquired|t\n\ncompleted|{"ok": 1}')" ]; then
        ok tle-nonsuperuser
    else
        cat "$WORK/tle.log" >&2
        bad tle-nonsuperuser "register/create/grant/claim as a pgtle_admin role: got '${got:-}' / '${got2:-}'"
    fi
else
    skip tle-nonsuperuser "no pg_tle"
fi

# --- template1: pg_tle and the registration, for every database made later --
if [ "$have_tle" = 1 ]; then
    idem_log "step template1"
    if idem_psql -d template1 -c "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO idem_tle_admin" >"$WORK/template1.log" 2>&1 &&
       idem_psql -U idem_tle_admin -d template1 -f "$TLE" >>"$WORK/template1.log" 2>&1; then
        ok template1
    else
        cat "$WORK/template1.log" >&2
        bad template1 "registering the pg_tle edition in template1 failed"
    fi
fi

# --- regress and isolation, the plain script and pg_tle ----------------------
count_results() { # log -> "pass fail"
    echo "$(grep -cE ' \.\.\. +ok( |$)|^ok [0-9]+ ' "$1") $(grep -cE ' \.\.\. +FAILED|^not ok [0-9]+ ' "$1")"
}
run_suite() { # step driver db src tests...
    local step=$1 driver=$2 db=$3 src=$4 out="$WORK/$1" log="$WORK/$1.log" rc p f expdir=(); shift 4
    idem_log "step $step"
    idem_as_pg mkdir -p "$out"
    # 16 and later take the expected output from the current directory
    # unless told (15: from --inputdir, which has no --expecteddir).
    [ "$IDEM_PG_MAJOR" -lt 16 ] || expdir=(--expecteddir="$src/test")
    idem_as_pg env PGOPTIONS="-c statement_timeout=${IDEM_STATEMENT_TIMEOUT:-180s}" \
        timeout --kill-after=10 "${IDEM_SUITE_TIMEOUT:-900}" "$driver" \
        --inputdir="$src/test" "${expdir[@]}" --outputdir="$out" --bindir="$SYS_BINDIR" \
        --host="$IDEM_PGHOST" --port="$IDEM_PGPORT" --user=postgres --dbname="$db" --use-existing \
        --launcher="perl $WORK/src/test/portable/context_filter.pl" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    read -r p f < <(count_results "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    record "$step" "$p" "$f"
    while read -r name; do failures+=("$step: $name"); done \
        < <(sed -nE 's/^[[:space:]]*(not ok [0-9]+ +[-+ ]*|test |[-+] )?([A-Za-z0-9_]+) +\.\.\. +FAILED.*/\2/p' "$log")
    [ ! -s "$out/regression.diffs" ] || cat "$out/regression.diffs"
}

regress_tests() { # edition
    (cd "$IDEM_TOP/test/sql" && ls *.sql; cd "$IDEM_TOP/test/portable/sql" && ls *.sql) | sed 's/\.sql$//' | sort |
        grep -vxF -f <(listed regress; [ "$1" != plain ] || listed regress-plain; echo .none.)
}
iso_tests=$(cd "$IDEM_TOP/test/specs" && ls *.spec | sed 's/\.spec$//' | sort | grep -vxF -f <(listed isolation; echo .none.))
for name in $(listed regress) $(listed regress-plain); do [ -f "$IDEM_TOP/test/sql/$name.sql" ] || bad exceptions "regress $name: no test/sql/$name.sql"; done
for name in $(listed isolation); do [ -f "$IDEM_TOP/test/specs/$name.spec" ] || bad exceptions "isolation $name: no test/specs/$name.spec"; done
for kind in expected expected-plain; do
    for f in "$IDEM_TOP"/test/portable/$kind/*.out; do
        [ -f "$f" ] || continue
        [ "$kind" = expected ] && [ -f "$IDEM_TOP/test/portable/sql/$(basename "$f" .out).sql" ] && continue
        grep -qE "^$kind $(basename "$f" .out) " "$EXCEPTIONS" || bad exceptions "test/portable/$kind/$(basename "$f") is not listed ($kind NAME reason)"
    done
    for name in $(listed "$kind"); do
        [ -f "$IDEM_TOP/test/portable/$kind/$name.out" ] || bad exceptions "$kind $name: no test/portable/$kind/$name.out"
    done
done
PGXS_DIR=$IDEM_PGXS_DIR

editions=(plain)
[ "$have_tle" = 1 ] && editions+=(tle)
for ed in "${editions[@]}"; do
    src=$WORK/src
    [ "$ed" != plain ] || src=$WORK/src-plain
    if make_db "idem_regress_$ed" "$ed" >"$WORK/db_$ed.log" 2>&1 && make_db "idem_iso_$ed" "$ed" >>"$WORK/db_$ed.log" 2>&1; then
        # shellcheck disable=SC2086
        run_suite "regress-$ed" "$PGXS_DIR/src/test/regress/pg_regress" "idem_regress_$ed" "$src" $(regress_tests "$ed")
        # shellcheck disable=SC2086
        run_suite "isolation-$ed" "$PGXS_DIR/src/test/isolation/pg_isolation_regress" "idem_iso_$ed" "$src" $iso_tests
    else
        cat "$WORK/db_$ed.log" >&2
        bad "install-$ed" "installing the $ed edition failed"
    fi
done
[ "$have_tle" = 1 ] || { skip regress-tle "no pg_tle"; skip isolation-tle "no pg_tle"; }

# --- parity: catalogs of the portable edition(s) ------------------------------
ignore=$(listed catalog-attribute | paste -sd, -)
catalog() { # db -> stdout
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$1" \
        -v schema=idem -v ignore="$ignore" -f "$WORK/src/test/portable/catalog.sql"
}
catalog_full() { # db -> stdout: catalog.sql comparing everything, and each function's body (portable against portable: upgrades)
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$1" \
        -v schema=idem -v ignore= -f "$WORK/src/test/portable/catalog.sql" &&
    idem_as_pg psql -X -q -At -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$1" -c "
        SELECT 'body:' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
               || E'\t' || l.lanname || ' md5 ' || pg_catalog.md5(p.prosrc)
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = 'idem'::pg_catalog.regnamespace ORDER BY 1"
}
make_db idem_parity_plain plain idem >>"$WORK/db_plain.log" 2>&1 && catalog idem_parity_plain >"$WORK/catalog.plain" \
    || bad parity "cataloguing the plain script failed"
[ "$have_tle" = 1 ] && { { make_db idem_parity_tle tle idem >>"$WORK/db_tle.log" 2>&1 && catalog idem_parity_tle >"$WORK/catalog.tle"; } ||
    bad parity "cataloguing the pg_tle edition failed"; }

# --- upgrade: the mechanism, with a synthetic next release -------------------
# A copy of the clone becomes release NEXT, as a release is made
# (docs/managed.md, "Releasing"): V's portable upgrades frozen, the C
# upgrades to V moved into sql/released/, their sums recorded,
# default_version bumped, then a new function and a new
# configuration table in the shared sources and in the C edition's
# upgrade sql/idempotency--V--NEXT.sql, which also re-declares the C
# function idem_status_is_valid unchanged (its portable body changes in
# NEXT: the portable upgrade must ship it) and declares a C function the
# portable edition omits (exceptions.txt), with its comment and REVOKE.
# Built with `make portable tle dbdev`.  Nothing of it is committed.
idem_log "step upgrade (synthetic release)"
NEXT=$(echo "$V" | awk -F. '{ printf "%d.%d.%d", $1, $2, $3 + 1 }')
NEXTDIR=$WORK/next
GEN="perl sql/portable/generate.pl"
mkdir -p "$NEXTDIR"
(cd "$WORK/clone" && tar --exclude=./build -cf - .) | tar -C "$NEXTDIR" -xf -
freeze_log=$WORK/next-freeze.log
(cd "$NEXTDIR" && for p in $($GEN upgrade-list); do
     [ "${p#*--}" = "$V" ] && [ ! -f "sql/released/portable/idempotency--$p.sql" ] || continue
     $GEN freeze "$p" && [ -f "sql/released/idempotency--$p.sql" ] && [ ! -e "sql/idempotency--$p.sql" ] || exit 1
 done) >"$freeze_log" 2>&1 || { cat "$freeze_log" >&2; bad upgrade-build "freezing $V's portable upgrades failed"; }
sed -i "s/^default_version *=.*/default_version = '$NEXT'/" "$NEXTDIR/idempotency.control"
next_sql() { # the objects release NEXT adds, in the form of the extension script
    cat <<EOF

-- The synthetic release $NEXT of test/scripts/portable.sh.
CREATE FUNCTION @extschema@.idem_synthetic_next()
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS \$\$ SELECT '$NEXT'::pg_catalog.text \$\$;
COMMENT ON FUNCTION @extschema@.idem_synthetic_next() IS 'test/scripts/portable.sh: the synthetic release';
CREATE TABLE @extschema@.idem_synthetic_next (k pg_catalog.text PRIMARY KEY);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_synthetic_next', '');
CREATE OR REPLACE FUNCTION @extschema@.idem_synthetic_c()
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'idem_synthetic_c'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idem_synthetic_c() IS 'test/scripts/portable.sh: a C function the portable edition omits';
REVOKE ALL ON FUNCTION @extschema@.idem_synthetic_c() FROM PUBLIC;
EOF
}
next_sql >> "$NEXTDIR/sql/idempotency.sql"
{ echo "\\echo Use \"ALTER EXTENSION idempotency UPDATE TO '$NEXT'\" to load this file. \\quit"
  next_sql
  echo
  echo "-- idem_status_is_valid: its portable body changes; the C declaration, unchanged."
  perl -0ne 'print "$1\n" if /^CREATE (FUNCTION \@extschema\@\.idem_status_is_valid\(.*?;)\n/ms' "$NEXTDIR/sql/idempotency.sql" |
      sed '1s/^/CREATE OR REPLACE /'
} > "$NEXTDIR/sql/idempotency--$V--$NEXT.sql"
perl -0pi -e 's/(-- portable: idem_status_is_valid\n.*?\nBEGIN\n)/$1    -- the synthetic release\n/s' "$NEXTDIR/sql/portable/records.sql"
echo "omit-function idem_synthetic_c test/scripts/portable.sh: the synthetic release's C-only function" >> "$NEXTDIR/sql/portable/exceptions.txt"
TLE_NEXT=$WORK/idempotency--pgtle-$NEXT.sql
PLAIN_NEXT=$WORK/idempotency-portable--$NEXT.sql
PLAIN_UP=$WORK/idempotency-portable--$V--$NEXT.sql
if grep -q "CREATE OR REPLACE FUNCTION @extschema@.idem_status_is_valid" "$NEXTDIR/sql/idempotency--$V--$NEXT.sql" &&
   grep -q "the synthetic release" "$NEXTDIR/sql/portable/records.sql" &&
   make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent portable tle dbdev >"$WORK/next.log" 2>&1 &&
   cp "$NEXTDIR/build/tle/idempotency--pgtle.sql" "$TLE_NEXT" &&
   cp "$NEXTDIR/build/portable/idempotency-portable--$NEXT.sql" "$PLAIN_NEXT" &&
   cp "$NEXTDIR/build/portable/idempotency-portable--$V--$NEXT.sql" "$PLAIN_UP" &&
   [ -f "$NEXTDIR/build/dbdev/idempotency/idempotency--$V--$NEXT.sql" ] &&
   grep -q "pgtle.install_update_path('idempotency', '$V', '$NEXT'" "$TLE_NEXT" &&
   grep -q "the synthetic release" "$PLAIN_UP" && ! grep -q "idem_synthetic_c" "$PLAIN_UP" "$PLAIN_NEXT"; then
    ok upgrade-build
else
    cat "$WORK/next.log" >&2
    bad upgrade-build "make portable tle dbdev of the synthetic release $NEXT failed, or its upgrade lacks the new body or has the omitted function"
fi
# A frozen upgrade is what the release built (the head says where it is from).
frozen_same=1
for f in "$WORK"/clone/build/portable/idempotency-portable--*--"$V".sql; do
    [ -f "$f" ] || continue
    cmp -s <(tail -n +3 "$f") <(tail -n +3 "$NEXTDIR/build/portable/${f##*/}") || frozen_same=0
done
if [ "$frozen_same" = 1 ]; then ok upgrade-frozen; else bad upgrade-frozen "a frozen portable upgrade to $V differs from the one $V built"; fi
# The generator refuses an upgrade past default_version, and a released
# upgrade whose portable form is not frozen.
cp "$NEXTDIR/sql/idempotency--$V--$NEXT.sql" "$NEXTDIR/sql/idempotency--$V--9.9.8.sql"
checks=0
make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent tle >"$WORK/next-bad.log" 2>&1 ||
    { grep -q "upgrades to 9.9.8, newer than default_version" "$WORK/next-bad.log" && checks=$((checks + 1)); }
rm -f "$NEXTDIR/sql/idempotency--$V--9.9.8.sql"
FROZEN=$(ls "$NEXTDIR"/sql/released/portable/idempotency--*--"$V".sql 2>/dev/null | head -n 1)
if [ -n "$FROZEN" ]; then
    mv "$FROZEN" "$WORK/frozen.orig"
    sed -i "\\|${FROZEN#"$NEXTDIR"/}|d" "$NEXTDIR/sql/released/SHA256SUMS"
    make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent tle >>"$WORK/next-bad.log" 2>&1 ||
        { grep -q "$V is released (default_version is $NEXT) and its portable upgrade is not frozen" "$WORK/next-bad.log" && checks=$((checks + 1)); }
    mv "$WORK/frozen.orig" "$FROZEN"
    (cd "$NEXTDIR" && $GEN sum "${FROZEN#"$NEXTDIR"/}" 2>/dev/null)
else
    checks=$((checks + 1))    # V has no portable upgrade to freeze
fi
if [ "$checks" = 2 ]; then ok upgrade-check; else
    cat "$WORK/next-bad.log" >&2
    bad upgrade-check "generate.pl accepted an upgrade past default_version, or a released one not frozen ($checks of 2 refused)"
fi
# ... and a released script (in sql/released/SHA256SUMS) edited afterwards,
# until its new sum is recorded (the one step after a deliberate fix in place).
REL=sql/released/idempotency--0.4.0--0.5.0.sql
cp "$NEXTDIR/$REL" "$WORK/released.orig"; cp "$NEXTDIR/sql/released/SHA256SUMS" "$WORK/sums.orig"
if make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent tle >"$WORK/next-released.log" 2>&1 &&
   echo "-- edited" >> "$NEXTDIR/$REL" &&
   ! make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent tle >>"$WORK/next-released.log" 2>&1 &&
   grep -q "$REL was released (sql/released/SHA256SUMS) and has been edited since" "$WORK/next-released.log" &&
   (cd "$NEXTDIR" && $GEN sum "$REL") >>"$WORK/next-released.log" 2>&1 &&
   make -C "$NEXTDIR" -s PG_CONFIG=/nonexistent tle >>"$WORK/next-released.log" 2>&1; then
    ok upgrade-released
else
    cat "$WORK/next-released.log" >&2
    bad upgrade-released "generate.pl did not accept the released scripts as they were, accepted one edited, or refused it after 'generate.pl sum'"
fi
cp "$WORK/released.orig" "$NEXTDIR/$REL"; cp "$WORK/sums.orig" "$NEXTDIR/sql/released/SHA256SUMS"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK"

# The state a database keeps across an upgrade, and what NEXT adds.
upgrade_probe() { # db schema [user]
    idem_psql -At -U "${3:-postgres}" -d "$1" -c "SET search_path = $2" \
        -c "SET idempotency.autocommit_claims = allow" -c "SELECT idem_claim('up', 'k1')" \
        -c "SELECT idem_synthetic_next()" \
        -c "SELECT count(*) FROM idem_synthetic_next" \
        -c "SELECT count(*) FILTER (WHERE prosrc LIKE '%the synthetic release%') || '/' || count(*) FROM pg_proc
             WHERE proname IN ('idem_status_is_valid', 'idem_synthetic_c') AND pronamespace = '$2'::regnamespace"
}
PROBE_NEXT=$(printf 'f\n%s\n0\n1/1' "$NEXT")

# pg_tle: a role in pgtle_admin registers V, creates the extension and
# claims; then registers NEXT's file (NEXT and the update path), and
# ALTER EXTENSION ... UPDATE moves it on; a fresh database gets NEXT by
# default; the catalogs of the two agree.
if [ "$have_tle" = 1 ]; then
    if { idem_psql -c "CREATE DATABASE idem_up_tle OWNER idem_tle_admin TEMPLATE template0" &&
         idem_psql -d idem_up_tle -c "CREATE EXTENSION pg_tle" &&
         idem_psql -U idem_tle_admin -d idem_up_tle -f "$TLE" &&
         idem_psql -U idem_tle_admin -d idem_up_tle -c "CREATE SCHEMA idem" -c "CREATE EXTENSION idempotency SCHEMA idem" \
             -c "SET idempotency.autocommit_claims = allow" -c "SELECT idem.idem_claim('up', 'k1')" &&
         idem_psql -U idem_tle_admin -d idem_up_tle -f "$TLE_NEXT" &&
         got=$(idem_psql -At -U idem_tle_admin -d idem_up_tle \
                 -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'" \
                 -c "SELECT default_version FROM pgtle.available_extensions() WHERE name = 'idempotency'" \
                 -c "ALTER EXTENSION idempotency UPDATE" \
                 -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") &&
         got2=$(upgrade_probe idem_up_tle idem idem_tle_admin) &&
         idem_psql -c "CREATE DATABASE idem_up_tle_fresh OWNER idem_tle_admin TEMPLATE template0" &&
         idem_psql -d idem_up_tle_fresh -c "CREATE EXTENSION pg_tle" &&
         idem_psql -U idem_tle_admin -d idem_up_tle_fresh -f "$TLE_NEXT" &&
         idem_psql -U idem_tle_admin -d idem_up_tle_fresh -c "CREATE SCHEMA idem" -c "CREATE EXTENSION idempotency SCHEMA idem" &&
         got3=$(idem_psql -At -d idem_up_tle_fresh -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") &&
         idem_psql -U idem_tle_admin -d idem_up_tle_fresh -f "$TLE_NEXT" 2>"$WORK/upgrade-tle-again.log" &&
         grep -q "version $NEXT is registered already" "$WORK/upgrade-tle-again.log" &&
         ! idem_psql -U idem_tle_admin -d idem_up_tle_fresh -f "$TLE" 2>"$WORK/upgrade-tle-older.log" &&
         grep -q "a newer version than $V is registered already" "$WORK/upgrade-tle-older.log" &&
         catalog_full idem_up_tle >"$WORK/catalog.up_tle" && catalog_full idem_up_tle_fresh >"$WORK/catalog.up_tle_fresh"
       } >"$WORK/upgrade-tle.log" 2>&1 &&
       [ "$got" = "$(printf '%s\n%s\n%s' "$V" "$NEXT" "$NEXT")" ] &&
       [ "$got2" = "$PROBE_NEXT" ] && [ "$got3" = "$NEXT" ]; then
        if diff -u "$WORK/catalog.up_tle_fresh" "$WORK/catalog.up_tle" >>"$WORK/upgrade-tle.log"; then ok upgrade-tle; else
            cat "$WORK/upgrade-tle.log" >&2
            bad upgrade-tle "the catalog after ALTER EXTENSION UPDATE differs from a fresh $NEXT"; fi
    else
        cat "$WORK/upgrade-tle.log" >&2
        bad upgrade-tle "register $V, create, register $NEXT, ALTER EXTENSION UPDATE: got '${got:-}' / '${got2:-}' / '${got3:-}'"
    fi
else
    skip upgrade-tle "no pg_tle"
fi

# The plain script: V installed into schema idem, then NEXT's upgrade
# script: it records NEXT, and refuses to run again (the schema has NEXT),
# on a schema without the objects, and without a schema named; the
# catalog equals a fresh NEXT's.
plain_run() { # db file [schema] -> psql's output and status
    idem_as_pg env PGOPTIONS="-c idempotency.install_schema=${3-idem}" \
        psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$1" -f "$2" 2>&1
}
if { make_db idem_up_plain plain idem && idem_psql -d idem_up_plain -c "SET idempotency.autocommit_claims = allow" -c "SELECT idem.idem_claim('up', 'k1')" &&
     plain_run idem_up_plain "$PLAIN_UP" &&
     got=$(idem_psql -At -d idem_up_plain -c "SELECT version, edition FROM idem.idem_portable_version") &&
     got2=$(upgrade_probe idem_up_plain idem) &&
     make_db idem_up_plain_fresh plain idem &&
     catalog_full idem_up_plain >"$WORK/catalog.up_plain"; } >"$WORK/upgrade-plain.log" 2>&1 &&
   [ "$got" = "$NEXT|portable" ] && [ "$got2" = "$PROBE_NEXT" ]; then
    ok upgrade-plain
else
    cat "$WORK/upgrade-plain.log" >&2
    bad upgrade-plain "the plain script's upgrade $V to $NEXT: got '${got:-}' / '${got2:-}'"
fi
# A fresh NEXT, to compare and to refuse the upgrade on.
if { idem_psql -c "CREATE DATABASE idem_up_plain_next" &&
     plain_run idem_up_plain_next "$PLAIN_NEXT" && catalog_full idem_up_plain_next >"$WORK/catalog.up_plain_next"; } >>"$WORK/upgrade-plain.log" 2>&1 &&
   diff -u "$WORK/catalog.up_plain_next" "$WORK/catalog.up_plain" >>"$WORK/upgrade-plain.log"; then
    ok upgrade-plain-catalog
else
    cat "$WORK/upgrade-plain.log" >&2
    bad upgrade-plain-catalog "the catalog after the plain upgrade differs from a fresh $NEXT"
fi
refused=0
out=$(plain_run idem_up_plain "$PLAIN_UP") ||
    { grep -q "has version $NEXT, and this script upgrades version $V to $NEXT" <<<"$out" && refused=$((refused + 1)); }
out=$(plain_run idem_up_plain_next "$PLAIN_UP") ||
    { grep -q "has version $NEXT, and this script upgrades version $V to $NEXT" <<<"$out" && refused=$((refused + 1)); }
out=$(plain_run idem_up_plain "$PLAIN_UP" public) ||
    { grep -q 'schema "public" has no idempotency objects installed by the plain script' <<<"$out" && refused=$((refused + 1)); }
out=$(plain_run idem_up_plain "$PLAIN_UP" "") ||
    { grep -q 'no schema named to upgrade' <<<"$out" && refused=$((refused + 1)); }
v_after=$(idem_psql -At -d idem_up_plain -c "SELECT version FROM idem.idem_portable_version" 2>&1)
if [ "$refused" = 4 ] && [ "$v_after" = "$NEXT" ]; then ok upgrade-plain-refuses; else
    bad upgrade-plain-refuses "the plain upgrade ran where it must refuse ($refused of 4 refused; version now '$v_after'): $out"; fi

# --- release: each released portable edition upgraded to V --------------------
# sql/released/portable/idempotency--R.sql is release R's extension script
# as it shipped (frozen); generate.pl wraps it as R's pg_tle file and plain
# script (byte for byte the released ones, but for the pg_tle file's newer
# pg_tle check).  Installed, given records (a claim, a completed result), a
# lease, an outbox message and a state machine, then upgraded by V's files
# (pg_tle: V's registration and ALTER EXTENSION UPDATE; plain: V's
# idempotency-portable--A--B.sql from R on, in order): the state is kept,
# and the catalog, bodies included, is a fresh V's.
idem_log "step release (from the released portable editions)"
release_state() { # db user: what a database of R holds
    idem_psql -U "$2" -d "$1" -f - <<'EOF'
SET search_path = idem;
SELECT idem_outbox_subscribe('c1', 'orders');
BEGIN; SELECT idem_claim('rel', 'c1'); COMMIT;
BEGIN; SELECT idem_claim('rel', 'c2'); SELECT idem_complete('rel', 'c2', '{"r": 1}'); COMMIT;
SELECT outcome FROM idem_begin('rel', 'l1', lease => '1 hour');
BEGIN; SELECT idem_claim('rel', 'o1'); SELECT idem_publish('orders', '{"n": 1}'); COMMIT;
SELECT idem_machine_define('m', '{"initial": ["a"], "transitions": {"a": ["b"], "b": []}}');
EOF
}
release_probe() { # db user -> what the database holds after the upgrade
    idem_psql -At -U "$2" -d "$1" -f - <<'EOF'
SET search_path = idem;
BEGIN;
SELECT idem_claim('rel', 'c1'), idem_claim('rel', 'c2'), idem_claim('rel', 'new');
COMMIT;
SELECT (idem_lookup('rel', 'c2')).result;
SELECT idem_finish('rel', 'l1', (SELECT token FROM idem_records WHERE scope = 'rel' AND key = 'l1'), '{"ok": 1}');
SELECT outcome, result FROM idem_begin('rel', 'l1');
SELECT topic, payload FROM idem_outbox_fetch('c1');
SELECT idem_can_transition('m', 'a', 'b'), idem_can_transition('m', 'b', 'a');
EOF
}
RELEASE_PROBE=$(printf 'f|f|t\n{"r": 1}\n\ncompleted|{"ok": 1}\norders|{"n": 1}\nt|f')
[ "$have_tle" = 1 ] && catalog_full idem_parity_tle >"$WORK/catalog-full.tle" 2>>"$WORK/release.log"
catalog_full idem_parity_plain >"$WORK/catalog-full.plain" 2>>"$WORK/release.log"
releases=$(cd "$WORK/clone/sql/released/portable" && ls | sed -nE 's/^idempotency--([0-9]+\.[0-9]+\.[0-9]+)\.sql$/\1/p')
[ -n "$releases" ] || bad release "no released portable edition in sql/released/portable"
for R in $releases; do
    [ "$R" != "$V" ] || continue
    TLE_R=$WORK/idempotency--pgtle-$R.sql
    PLAIN_R=$WORK/idempotency-portable--$R.sql
    if ! (cd "$WORK/clone" && $GEN tle "sql/released/portable/idempotency--$R.sql" >"$TLE_R" &&
          $GEN plain "sql/released/portable/idempotency--$R.sql" >"$PLAIN_R") 2>>"$WORK/release.log"; then
        cat "$WORK/release.log" >&2; bad "release-$R" "generate.pl could not wrap the released $R"; continue
    fi
    [ "$(id -u)" -ne 0 ] || chown postgres: "$TLE_R" "$PLAIN_R"
    if [ "$have_tle" = 1 ]; then
        db=idem_rel_tle_${R//./_}
        if { idem_psql -c "CREATE DATABASE $db OWNER idem_tle_admin TEMPLATE template0" &&
             idem_psql -d "$db" -c "CREATE EXTENSION pg_tle" &&
             idem_psql -U idem_tle_admin -d "$db" -f "$TLE_R" &&
             idem_psql -U idem_tle_admin -d "$db" -c "CREATE SCHEMA idem" -c "CREATE EXTENSION idempotency SCHEMA idem" &&
             release_state "$db" idem_tle_admin &&
             got=$(idem_psql -At -U idem_tle_admin -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") &&
             idem_psql -U idem_tle_admin -d "$db" -f "$TLE" &&
             idem_psql -U idem_tle_admin -d "$db" -c "ALTER EXTENSION idempotency UPDATE" &&
             got2=$(idem_psql -At -U idem_tle_admin -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") &&
             got3=$(release_probe "$db" idem_tle_admin) &&
             catalog_full "$db" >"$WORK/catalog-full.rel_tle_$R"; } >>"$WORK/release.log" 2>&1 &&
           [ "$got" = "$R" ] && [ "$got2" = "$V" ] && [ "$got3" = "$RELEASE_PROBE" ]; then
            if diff -u "$WORK/catalog-full.tle" "$WORK/catalog-full.rel_tle_$R" >>"$WORK/release.log"; then ok "release-tle-$R"; else
                cat "$WORK/release.log" >&2
                bad "release-tle-$R" "the catalog after ALTER EXTENSION UPDATE from the released $R differs from a fresh $V (diff above)"; fi
        else
            cat "$WORK/release.log" >&2
            bad "release-tle-$R" "pg_tle: released $R, its state, V's file, ALTER EXTENSION UPDATE: got '${got:-}' / '${got2:-}' / '${got3:-}'"
        fi
    else
        skip "release-tle-$R" "no pg_tle"
    fi
    db=idem_rel_plain_${R//./_}
    ran=""
    if { idem_psql -c "CREATE DATABASE $db" && plain_run "$db" "$PLAIN_R" && release_state "$db" postgres &&
         got=$(idem_psql -At -d "$db" -c "SELECT version FROM idem.idem_portable_version") &&
         at=$R && for p in $(cd "$WORK/clone" && $GEN upgrade-list); do
             [ "${p%--*}" = "$at" ] || continue
             plain_run "$db" "$WORK/clone/build/portable/idempotency-portable--$p.sql" || exit 1
             at=${p#*--}; ran="$ran $p"
         done &&
         got2=$(idem_psql -At -d "$db" -c "SELECT version, edition FROM idem.idem_portable_version") &&
         got3=$(release_probe "$db" postgres) &&
         catalog_full "$db" >"$WORK/catalog-full.rel_plain_$R"; } >>"$WORK/release.log" 2>&1 &&
       [ "$got" = "$R" ] && [ "$got2" = "$V|portable" ] && [ "$got3" = "$RELEASE_PROBE" ]; then
        if diff -u "$WORK/catalog-full.plain" "$WORK/catalog-full.rel_plain_$R" >>"$WORK/release.log"; then ok "release-plain-$R"; else
            cat "$WORK/release.log" >&2
            bad "release-plain-$R" "the catalog after the plain upgrades from the released $R differs from a fresh $V (diff above)"; fi
    else
        cat "$WORK/release.log" >&2
        bad "release-plain-$R" "plain: released $R, its state, the upgrades ($ran): got '${got:-}' / '${got2:-}' / '${got3:-}'"
    fi
done

# --- one copy per database: every install refuses beside another edition -----
# (sql/idempotency.sql's first statement).  The C edition's own cases are
# in the parity step below and in test/sql/one_copy.sql.
idem_log "step one-copy"
refuses() { # log what... : the output names the first copy
    grep -q "idempotency is installed in this database already" "$1" &&
        grep -q "DETAIL:  Schema idem has idempotency $V ($2)" "$1"
}
if [ "$have_tle" = 1 ]; then
    # The plain script beside the pg_tle extension, then the reverse.
    if make_db idem_one_tle tle idem >"$WORK/one-tle.log" 2>&1 &&
       ! plain_run idem_one_tle "$PLAIN" idem2 >>"$WORK/one-tle.log" 2>&1 &&
       refuses "$WORK/one-tle.log" "the portable edition, through pg_tle" &&
       [ "$(idem_psql -At -d idem_one_tle -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'idem2'")" = 0 ]; then
        ok one-copy-tle-then-plain
    else
        cat "$WORK/one-tle.log" >&2
        bad one-copy-tle-then-plain "the plain script installed beside the pg_tle extension, or said so unclearly"
    fi
    if make_db idem_one_plain plain idem >"$WORK/one-plain.log" 2>&1 &&
       ! idem_psql -d idem_one_plain -c "CREATE SCHEMA idem2" -c "CREATE EXTENSION idempotency SCHEMA idem2" \
           >>"$WORK/one-plain.log" 2>&1 &&
       refuses "$WORK/one-plain.log" "the portable edition, plain script" &&
       [ "$(idem_psql -At -d idem_one_plain -c "SELECT count(*) FROM pg_extension WHERE extname = 'idempotency'")" = 0 ]; then
        ok one-copy-plain-then-tle
    else
        cat "$WORK/one-plain.log" >&2
        bad one-copy-plain-then-tle "CREATE EXTENSION (pg_tle) succeeded beside the plain script, or said so unclearly"
    fi
else
    skip one-copy-tle-then-plain "no pg_tle"; skip one-copy-plain-then-tle "no pg_tle"
fi
# The pg_tle file where pg_tle is missing says so, and how to get it.
if idem_psql -c "CREATE DATABASE idem_no_tle TEMPLATE template0" >"$WORK/no-tle.log" 2>&1 &&
   ! idem_psql -d idem_no_tle -f "$TLE" >>"$WORK/no-tle.log" 2>&1 &&
   grep -q "ERROR:  idempotency: pg_tle is not installed in this database" "$WORK/no-tle.log" &&
   grep -q "HINT:  Add pg_tle to shared_preload_libraries" "$WORK/no-tle.log"; then
    ok tle-file-without-pg_tle
else
    cat "$WORK/no-tle.log" >&2
    bad tle-file-without-pg_tle "the pg_tle file run without pg_tle did not say that pg_tle is missing"
fi

# --- dbdev: the database.dev package, installed as dbdev.install does ----------
# (pgtle.install_extension under the name HANDLE@idempotency, each upgrade
# with install_update_path); created under that name, it finds its schema
# and claims; the synthetic release's package updates it.
if [ "$have_tle" = 1 ]; then
    idem_log "step dbdev"
    DBDEV=$WORK/clone/build/dbdev/idempotency
    DBDEV_NEXT=$NEXTDIR/build/dbdev/idempotency
    dbdev_register() { # db dir: as dbdev.install, by the pgtle_admin role
        local dir=$2 v f a b
        v=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$dir/idempotency.control")
        {
            echo "DO \$dbdev\$ BEGIN"
            echo "IF NOT EXISTS (SELECT FROM pgtle.available_extensions() WHERE name = 'test@idempotency') THEN"
            echo "PERFORM pgtle.install_extension('test@idempotency', '$v', 'test', \$dbdev_sql\$$(cat "$dir/idempotency--$v.sql")\$dbdev_sql\$);"
            echo "ELSE PERFORM pgtle.install_extension_version_sql('test@idempotency', '$v', \$dbdev_sql\$$(cat "$dir/idempotency--$v.sql")\$dbdev_sql\$);"
            echo "PERFORM pgtle.set_default_version('test@idempotency', '$v'); END IF;"
            for f in "$dir"/idempotency--*--*.sql; do
                [ -f "$f" ] || continue
                f=$(basename "$f" .sql)
                a=$(cut -d- -f3 <<<"$f"); b=$(cut -d- -f5 <<<"$f")
                echo "IF NOT EXISTS (SELECT FROM pgtle.extension_update_paths('test@idempotency') p WHERE p.source = '$a' AND p.target = '$b' AND p.path = '$a--$b') THEN"
                echo "PERFORM pgtle.install_update_path('test@idempotency', '$a', '$b', \$dbdev_sql\$$(cat "$dir/$f.sql")\$dbdev_sql\$); END IF;"
            done
            echo "END \$dbdev\$;"
        } | idem_psql -U idem_tle_admin -d "$1" -f -
    }
    if { [ -f "$DBDEV/idempotency.control" ] && [ -f "$DBDEV/README.md" ] && [ -f "$DBDEV/idempotency--$V.sql" ] &&
         idem_psql -c "CREATE DATABASE idem_dbdev OWNER idem_tle_admin TEMPLATE template0" &&
         idem_psql -d idem_dbdev -c "CREATE EXTENSION pg_tle" &&
         dbdev_register idem_dbdev "$DBDEV" &&
         idem_psql -U idem_tle_admin -d idem_dbdev -c "CREATE SCHEMA idem" -c "CREATE EXTENSION \"test@idempotency\" SCHEMA idem" &&
         got=$(idem_psql -At -U idem_tle_admin -d idem_dbdev -c "SELECT idem.idem_grant('idem_tle_admin')" \
                 -c "SET idempotency.autocommit_claims = allow" -c "SELECT idem.idem_claim('d', 'k'), idem.idem_claim('d', 'k')") &&
         # One copy: the plain script beside it refuses, naming the package.
         ! plain_run idem_dbdev "$PLAIN" idem2 >"$WORK/dbdev-one.log" 2>&1 &&
         refuses "$WORK/dbdev-one.log" "the portable edition, database.dev package test@idempotency" &&
         dbdev_register idem_dbdev "$DBDEV_NEXT" &&
         got2=$(idem_psql -At -U idem_tle_admin -d idem_dbdev -c "ALTER EXTENSION \"test@idempotency\" UPDATE" \
                 -c "SELECT extversion FROM pg_extension WHERE extname = 'test@idempotency'" -c "SELECT idem.idem_synthetic_next()"); } \
         >"$WORK/dbdev.log" 2>&1 &&
       [ "$got" = "$(printf '\nt|f')" ] && [ "$got2" = "$(printf '%s\n%s' "$NEXT" "$NEXT")" ]; then
        ok dbdev
    else
        cat "$WORK/dbdev.log" >&2
        bad dbdev "the database.dev package as test@idempotency: got '${got:-}' / '${got2:-}'"
    fi
else
    skip dbdev "no pg_tle"
fi
idem_cluster_stop

# The C edition: built into a private copy of the installation (as make test).
idem_log "step parity: building the C edition"
idem_private_install "$WORK/c"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK/src"
idem_cluster_start "$WORK/ccluster"
if idem_psql -c "CREATE DATABASE idem_parity_c" && idem_psql -d idem_parity_c -c "CREATE SCHEMA idem" \
       -c "CREATE EXTENSION idempotency SCHEMA idem" >/dev/null && catalog idem_parity_c >"$WORK/catalog.c"; then
    for ed in "${editions[@]}"; do
        if [ -s "$WORK/catalog.$ed" ] &&
           perl "$IDEM_TOP/test/portable/compare.pl" "$WORK/catalog.c" "$WORK/catalog.$ed" "$EXCEPTIONS" "$ed"; then ok "parity-$ed"; else bad "parity-$ed" "catalog differs from the C edition's"; fi
    done
else
    bad parity "creating the C edition failed"
fi
[ "$have_tle" = 1 ] || skip parity-tle "no pg_tle"

# One copy, the C edition: the plain script beside the C extension (in
# another schema), and CREATE EXTENSION beside the plain script.
if ! plain_run idem_parity_c "$PLAIN" idem2 >"$WORK/one-c.log" 2>&1 &&
   refuses "$WORK/one-c.log" "the C edition" &&
   [ "$(idem_psql -At -d idem_parity_c -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'idem2'")" = 0 ]; then
    ok one-copy-c-then-plain
else
    cat "$WORK/one-c.log" >&2
    bad one-copy-c-then-plain "the plain script installed beside the C edition, or said so unclearly"
fi
if { idem_psql -c "CREATE DATABASE idem_one_c" && plain_run idem_one_c "$PLAIN" idem; } >"$WORK/one-c2.log" 2>&1 &&
   ! idem_psql -d idem_one_c -c "CREATE SCHEMA idem2" -c "CREATE EXTENSION idempotency SCHEMA idem2" >>"$WORK/one-c2.log" 2>&1 &&
   refuses "$WORK/one-c2.log" "the portable edition, plain script" &&
   [ "$(idem_psql -At -d idem_one_c -c "SELECT count(*) FROM pg_extension WHERE extname = 'idempotency'")" = 0 ]; then
    ok one-copy-plain-then-c
else
    cat "$WORK/one-c2.log" >&2
    bad one-copy-plain-then-c "CREATE EXTENSION (the C edition) succeeded beside the plain script, or said so unclearly"
fi

# --- tap: test/portable/t/*.pl -------------------------------------------------
# With the two installations: the portable edition's (pg_tle when it has
# it, no C edition) and the private one built for parity (the C edition).
# 001: a pg_tle database dumped into the C edition (needs pg_tle); 002:
# idem_purge scheduled with pg_cron (needs pg_cron; pg_tle or the plain
# script).  A test without what it needs skips itself, counted skipped.
idem_log "step tap"
idem_as_pg mkdir -p "$WORK/tap"
tap_env=(PERL5LIB="$IDEM_PGXS_DIR/src/test/perl"
         PG_REGRESS="$IDEM_PGXS_DIR/src/test/regress/pg_regress"
         TESTDIR="$WORK/tap"
         IDEM_PORTABLE_INSTALL="$(dirname "$SYS_BINDIR")" IDEM_C_INSTALL="$(dirname "$IDEM_BINDIR")"
         IDEM_PLAIN_FILE="$PLAIN")
[ "$have_tle" = 1 ] && tap_env+=(IDEM_TLE_INSTALL="$(dirname "$SYS_BINDIR")" IDEM_TLE_FILE="$TLE")
[ "$have_cron" = 1 ] && tap_env+=(IDEM_CRON=1)
(cd "$WORK/src" && idem_as_pg env "${tap_env[@]}" \
    timeout --kill-after=10 "${IDEM_SUITE_TIMEOUT:-900}" \
    prove test/portable/t/*.pl) >"$WORK/tap.log" 2>&1
rc=$?
cat "$WORK/tap.log"
tap_files=$(grep -cE '^test/portable/t/\S+\.pl \.+ ' "$WORK/tap.log")
tap_bad=$(grep -cE '^test/portable/t/\S+\.pl \.+ .*(Dubious|Failed)' "$WORK/tap.log")
tap_skip=$(grep -cE '^test/portable/t/\S+\.pl \.+ skipped' "$WORK/tap.log")
if [ "$rc" -ne 0 ] && [ "$tap_bad" -eq 0 ]; then tap_bad=1; fi
record tap $((tap_files - tap_bad - tap_skip)) "$tap_bad" "$tap_skip"
while read -r line; do skips+=("tap: $line"); done \
    < <(sed -nE 's/^(test\/portable\/t\/\S+\.pl) \.+ skipped: (.*)/\1: \2/p' "$WORK/tap.log")
if [ "$tap_bad" -gt 0 ]; then
    failures+=("tap: see $WORK/tap/tmp_check/log (KEEP_WORK=1 keeps it)")
    for f in "$WORK"/tap/tmp_check/log/regress_log_*; do
        [ -f "$f" ] && { echo "---- $f (last 60 lines)"; tail -n 60 "$f"; }
    done
fi

echo
if [ ${#failures[@]} -gt 0 ]; then
    echo "== failures"
    for line in "${failures[@]}"; do echo "   $line"; done
    echo
fi
echo "== summary ($(( $(date +%s) - T0 )) s)"
for line in "${summary[@]}"; do echo "   $line"; done
for line in "${skips[@]}"; do echo "   skipped $line"; done
echo
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
