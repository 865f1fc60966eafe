# Shared shell functions for `make test`, `make demo` and `make bench`.
# Sourced, not run.  Everything here works on a fresh Debian 12 as root
# (it installs what is missing) and as an ordinary user (it says what to
# install, then stops).
#
#   idem_setup [extra debian packages...]   install PostgreSQL 15 + build deps
#   idem_build_install                      build with -Werror and install
#   idem_cluster_start DIR [conf lines...]  throwaway cluster under DIR
#   idem_cluster_stop                       stop it (also run from the trap)
#   idem_as_pg CMD...                       run CMD as the cluster's OS user
#   idem_psql [psql args...]                psql against the throwaway cluster

set -o pipefail

IDEM_PG_MAJOR=${IDEM_PG_MAJOR:-15}
IDEM_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

idem_log() { printf '== %s\n' "$*" >&2; }
idem_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Packages every target needs.
IDEM_BASE_PACKAGES="postgresql-$IDEM_PG_MAJOR postgresql-server-dev-$IDEM_PG_MAJOR libipc-run-perl make gcc"

idem_missing_packages() {
    local p missing=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $p"
        fi
    done
    echo "${missing# }"
}

idem_setup() {
    local missing
    missing=$(idem_missing_packages $IDEM_BASE_PACKAGES "$@")
    if [ -n "$missing" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "Missing Debian packages:$missing" >&2
            echo "Run this, then try again:" >&2
            echo "  sudo apt-get update && sudo apt-get install -y $missing" >&2
            exit 1
        fi
        idem_log "installing:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2 || idem_die "apt-get update failed"
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing >&2 \
            || idem_die "apt-get install failed"
    fi
    IDEM_BINDIR=/usr/lib/postgresql/$IDEM_PG_MAJOR/bin
    IDEM_PG_CONFIG=$IDEM_BINDIR/pg_config
    [ -x "$IDEM_PG_CONFIG" ] || idem_die "$IDEM_PG_CONFIG not found"
    IDEM_PGXS_DIR=$(dirname "$("$IDEM_PG_CONFIG" --pgxs)")/../..
    IDEM_PGXS_DIR=$(cd "$IDEM_PGXS_DIR" && pwd)
    export IDEM_BINDIR IDEM_PG_CONFIG IDEM_PGXS_DIR
}

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
idem_as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- env PATH="$IDEM_BINDIR:$PATH" "$@"
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

idem_psql() {
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres "$@"
}
