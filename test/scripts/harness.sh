# Shared shell functions for `make test`, `make demo` and `make bench`.
# Sourced, not run.  Everything here works on a fresh Debian 12 as root
# (it installs what is missing) and as an ordinary user (it says what to
# install, then stops).
#
#   idem_setup [extra debian packages...]   choose PostgreSQL (PG_CONFIG), install deps
#   idem_private_install DIR                build a snapshot into a private copy
#   idem_build_install                      build with -Werror and install
#   idem_cluster_start DIR [conf lines...]  throwaway cluster under DIR
#   idem_cluster_stop                       stop it (also run from the trap)
#   idem_work_trap [hook]                   on exit: hook, stop the cluster,
#                                           remove $WORK (KEEP_WORK=1 keeps it)
#   idem_on_exit FUNC                       on exit run FUNC; INT/TERM exit 130
#   idem_as_pg CMD...                       run CMD as the cluster's OS user
#   idem_psql [psql args...]                psql against the throwaway cluster

set -o pipefail

IDEM_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

idem_log() { printf '== %s\n' "$*" >&2; }
idem_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Which PostgreSQL: PG_CONFIG names its pg_config (a PGDG package's, a
# source build's).  Without it, pg_config on PATH is used when it has PGXS;
# with neither, PostgreSQL 15 is installed from Debian (as root).
IDEM_PG_MAJOR_MIN=15
IDEM_PG_MAJOR_MAX=19

# Packages every target needs besides PostgreSQL itself.
IDEM_TOOL_PACKAGES="libipc-run-perl make gcc"

idem_missing_packages() {
    local p missing=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $p"
        fi
    done
    echo "${missing# }"
}

idem_install_packages() { # packages...
    local missing
    command -v dpkg-query >/dev/null || return 0
    missing=$(idem_missing_packages "$@")
    [ -n "$missing" ] || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "Missing Debian packages:$missing" >&2
        echo "Run this, then try again:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y $missing" >&2
        exit 1
    fi
    idem_log "running as root: installing these missing Debian packages (apt-get install):"
    printf '     %s\n' "$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || idem_die "apt-get update failed"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2 \
        || idem_die "apt-get install failed"
}

# Does this pg_config have PGXS and the server headers?
idem_pg_config_usable() {
    [ -f "$("$1" --pgxs 2>/dev/null)" ] && [ -f "$("$1" --includedir-server 2>/dev/null)/postgres.h" ]
}

# The pg_config to use: $PG_CONFIG when set, else pg_config on PATH when it
# is usable, else none (empty).
idem_find_pg_config() {
    local c=${PG_CONFIG:-}
    if [ -n "$c" ] && [ "$c" != pg_config ]; then
        command -v "$c" >/dev/null || idem_die "PG_CONFIG=$c: no such program"
        command -v "$c"
        return
    fi
    c=$(command -v pg_config 2>/dev/null) || return 0
    if idem_pg_config_usable "$c"; then echo "$c"; fi
}

# idem_setup [extra debian packages...]
idem_setup() {
    local pgc
    pgc=$(idem_find_pg_config)
    if [ -z "$pgc" ]; then
        idem_install_packages postgresql-15 postgresql-server-dev-15 $IDEM_TOOL_PACKAGES "$@"
        pgc=/usr/lib/postgresql/15/bin/pg_config
    else
        idem_install_packages $IDEM_TOOL_PACKAGES "$@"
    fi
    [ -x "$pgc" ] || idem_die "$pgc not found"
    idem_pg_config_usable "$pgc" \
        || idem_die "$pgc has no PGXS or server headers (install the server development package, e.g. postgresql-server-dev-15)"
    IDEM_PG_CONFIG=$pgc
    IDEM_PG_MAJOR=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    case $IDEM_PG_MAJOR in ''|*[!0-9]*) idem_die "cannot tell the version of $pgc";; esac
    if [ "$IDEM_PG_MAJOR" -lt $IDEM_PG_MAJOR_MIN ] || [ "$IDEM_PG_MAJOR" -gt $IDEM_PG_MAJOR_MAX ]; then
        idem_die "$pgc is PostgreSQL $IDEM_PG_MAJOR; idempotency supports $IDEM_PG_MAJOR_MIN to $IDEM_PG_MAJOR_MAX"
    fi
    IDEM_BINDIR=$("$pgc" --bindir)
    IDEM_PGXS_DIR=$(dirname "$("$pgc" --pgxs)")/../..
    IDEM_PGXS_DIR=$(cd "$IDEM_PGXS_DIR" && pwd)
    export IDEM_BINDIR IDEM_PG_CONFIG IDEM_PGXS_DIR IDEM_PG_MAJOR
    idem_log "PostgreSQL $("$pgc" --version | awk '{print $2}') ($pgc)"
}

# idem_private_install DIR [make arguments...]
# A private installation under DIR: a copy of PostgreSQL's bin, lib and
# share directories (PostgreSQL finds lib and share relative to its
# binaries), into which a snapshot of the checkout is built and installed
# by DESTDIR.  Nothing on the system is written, so runs may overlap and
# the checkout may be edited meanwhile.  Sets IDEM_BINDIR to the copy's.
# With IDEM_PRIVATE_BUILD=0 the copy keeps the extension installed on the
# system instead (make bench BENCH_BUILD=0).
idem_private_install() {
    local dir=$1 bindir libdir sharedir
    shift
    bindir=$("$IDEM_PG_CONFIG" --bindir)
    libdir=$("$IDEM_PG_CONFIG" --pkglibdir)
    sharedir=$("$IDEM_PG_CONFIG" --sharedir)
    mkdir -p "$dir/pg$(dirname "$bindir")" "$dir/pg$(dirname "$libdir")" "$dir/pg$(dirname "$sharedir")"
    cp -a "$bindir" "$dir/pg$(dirname "$bindir")/" || idem_die "copying $bindir failed"
    [ -d "$dir/pg$libdir" ] || cp -a "$libdir" "$dir/pg$(dirname "$libdir")/" || idem_die "copying $libdir failed"
    cp -a "$sharedir" "$dir/pg$(dirname "$sharedir")/" || idem_die "copying $sharedir failed"
    IDEM_BINDIR=$dir/pg$bindir
    export IDEM_BINDIR
    if [ "${IDEM_PRIVATE_BUILD:-1}" = 0 ]; then
        [ -f "$dir/pg$libdir/idempotency.so" ] || idem_die "idempotency.so is not installed in $libdir (run make install)"
        return
    fi
    rm -rf "$dir/pg$libdir"/idempotency.so "$dir/pg$libdir"/bitcode/idempotency* \
           "$dir/pg$sharedir"/extension/idempotency*
    mkdir -p "$dir/build"
    (cd "$IDEM_TOP" && tar --exclude=.git --exclude='*.o' --exclude='*.bc' --exclude='*.so' \
        --exclude=./results --exclude=./tmp_check --exclude=./build --exclude=node_modules -cf - .) \
        | tar -C "$dir/build" -xf - || idem_die "copying the checkout failed"
    idem_log "building the extension (-Werror) into a private installation"
    if ! make -C "$dir/build" -s -j"$(nproc 2>/dev/null || echo 2)" PG_CONFIG="$IDEM_PG_CONFIG" "$@" all >"$dir/build.log" 2>&1 ||
       ! make -C "$dir/build" -s PG_CONFIG="$IDEM_PG_CONFIG" "$@" install DESTDIR="$dir/pg" >>"$dir/build.log" 2>&1; then
        cat "$dir/build.log" >&2
        idem_die "build failed"
    fi
}

# Build and install into the PostgreSQL installation itself (make demo).
idem_build_install() {
    idem_log "building and installing the extension"
    make -C "$IDEM_TOP" -s PG_CONFIG="$IDEM_PG_CONFIG" all >&2 || idem_die "build failed"
    local libdir
    libdir=$("$IDEM_PG_CONFIG" --pkglibdir)
    if [ -w "$libdir" ]; then
        make -C "$IDEM_TOP" -s PG_CONFIG="$IDEM_PG_CONFIG" install >&2 || idem_die "install failed"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo make -C "$IDEM_TOP" -s PG_CONFIG="$IDEM_PG_CONFIG" install >&2 || idem_die "install failed"
    else
        echo "Cannot write $libdir. Run this, then try again:" >&2
        echo "  sudo make -C $IDEM_TOP PG_CONFIG=$IDEM_PG_CONFIG install" >&2
        exit 1
    fi
}

# The server refuses to run as root: as root, the cluster runs as postgres.
# As root, a directory postgres cannot enter (a checkout under /root, or
# a clone in a mode-700 mktemp -d) is left for / first: otherwise every
# psql would print "could not change directory" into what a test reads.
# Relative paths could not work from such a directory anyway.
_idem_pg_cwd=
_idem_pg_cwd_ok=
idem_as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        if [ "$PWD" != "$_idem_pg_cwd" ]; then
            _idem_pg_cwd=$PWD
            if runuser -u postgres -- test -x "$PWD" 2>/dev/null; then _idem_pg_cwd_ok=1; else _idem_pg_cwd_ok=0; fi
        fi
        if [ "$_idem_pg_cwd_ok" = 1 ]; then
            runuser -u postgres -- env PATH="$IDEM_BINDIR:$PATH" "$@"
        else
            (cd / && runuser -u postgres -- env PATH="$IDEM_BINDIR:$PATH" "$@")
        fi
    else
        env PATH="$IDEM_BINDIR:$PATH" "$@"
    fi
}

# A private work directory the cluster's OS user can read and write.
idem_workdir() {
    local dir
    dir=$(mktemp -d /tmp/idempotency.XXXXXX)
    chmod 755 "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$dir"
    fi
    echo "$dir"
}

# A free TCP port number for the cluster (it listens on a Unix socket only,
# but the port names the socket file and must not clash).
idem_free_port() {
    local port
    for _ in $(seq 1 50); do
        port=$((20000 + RANDOM % 20000))
        if ! ls /tmp/.s.PGSQL."$port" >/dev/null 2>&1 && \
           ! (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    idem_die "no free port found"
}

# idem_cluster_start DIR [extra postgresql.conf lines...]
idem_cluster_start() {
    IDEM_CLUSTER_DIR=$1; shift
    IDEM_PGDATA=$IDEM_CLUSTER_DIR/data
    IDEM_PGHOST=$IDEM_CLUSTER_DIR/sock
    IDEM_PGPORT=$(idem_free_port)
    export IDEM_CLUSTER_DIR IDEM_PGDATA IDEM_PGHOST IDEM_PGPORT
    idem_as_pg mkdir -p "$IDEM_PGHOST"
    idem_as_pg initdb -D "$IDEM_PGDATA" -A trust -U postgres -E UTF8 \
        --locale=C.UTF-8 >"$IDEM_CLUSTER_DIR/initdb.log" 2>&1 \
        || { cat "$IDEM_CLUSTER_DIR/initdb.log" >&2; idem_die "initdb failed"; }
    {
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$IDEM_PGHOST'"
        echo "port = $IDEM_PGPORT"
        echo "max_prepared_transactions = 10"
        echo "max_connections = 60"
        echo "fsync = off"
        echo "log_min_messages = warning"
        local line
        for line in "$@"; do echo "$line"; done
    } | idem_as_pg tee -a "$IDEM_PGDATA/postgresql.conf" >/dev/null
    idem_as_pg pg_ctl -D "$IDEM_PGDATA" -l "$IDEM_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null \
        || { cat "$IDEM_CLUSTER_DIR/server.log" >&2; idem_die "server did not start"; }
    export PGHOST=$IDEM_PGHOST PGPORT=$IDEM_PGPORT PGUSER=postgres
}

idem_cluster_stop() {
    if [ -n "${IDEM_PGDATA:-}" ] && [ -f "$IDEM_PGDATA/postmaster.pid" ]; then
        idem_as_pg pg_ctl -D "$IDEM_PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 \
            || idem_as_pg pg_ctl -D "$IDEM_PGDATA" -m immediate stop >/dev/null 2>&1
    fi
}

# The clean-up trap of every script with a work directory: on exit (and on
# INT or TERM, which exit 130) run the hook function if one is named, stop
# the throwaway cluster, and remove $WORK, unless KEEP_WORK=1, which keeps
# it and says where.  A script with a clean-up of its own passes that
# function to idem_on_exit instead.
idem_on_exit() { # function
    trap "$1" EXIT
    trap 'exit 130' INT TERM
}

idem_work_trap() { # [hook function]
    IDEM_CLEANUP_HOOK=${1:-}
    idem_on_exit idem_work_cleanup
}

idem_work_cleanup() {
    [ -z "${IDEM_CLEANUP_HOOK:-}" ] || "$IDEM_CLEANUP_HOOK"
    idem_cluster_stop
    if [ "${KEEP_WORK:-0}" = 1 ]; then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}

idem_psql() {
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres "$@"
}
