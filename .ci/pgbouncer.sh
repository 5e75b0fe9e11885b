#!/usr/bin/env bash
# PgBouncer in transaction pooling mode on 127.0.0.1:${REDRIVE_PGBOUNCER_PORT:-6433}, in front of
# the local PostgreSQL (127.0.0.1:5432, trust auth), for tests/faults/test_pgbouncer.py.
# Installs Debian's pgbouncer if missing; leaves a running one alone. Not the package's own
# instance (which, if it started, holds 6432 with its own settings).
set -euo pipefail
port=${REDRIVE_PGBOUNCER_PORT:-6433}
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    exit 0
fi
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq pgbouncer >/dev/null 2>&1 || {
        apt-get update -qq && apt-get install -y -qq pgbouncer >/dev/null
    }
fi
bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
dir=/tmp/redrive-pgbouncer
mkdir -p "$dir"
cat > "$dir/userlist.txt" <<USERS
"postgres" ""
USERS
cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
chown -R postgres "$dir" 2>/dev/null || true
if [ "$(id -u)" = 0 ]; then
    "$bin" -d -u postgres "$dir/pgbouncer.ini"
else
    "$bin" -d "$dir/pgbouncer.ini"
fi
for _ in $(seq 1 30); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && exit 0
    sleep 0.2
done
echo "pgbouncer did not start; its log:" >&2
cat "$dir/pgbouncer.log" >&2 || true
exit 1
