#!/usr/bin/env bash
# Installs PostgreSQL from Debian's packages when missing, starts a cluster on 127.0.0.1:5432, and sets the
# password of the `postgres` role to `postgres`. Prints the URL the tests use. Run as root.
set -euo pipefail
exec 3>&1 1>&2   # everything but the URL goes to stderr

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
fi
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | grep -q "^$version main"; then
    pg_createcluster "$version" main >/dev/null
fi
# The server outlives this script: it must not inherit the caller's pipes (fd 3 is the URL's), or a
# caller reading this script's output through `$(...)` would wait for the server to exit.
pg_ctlcluster "$version" main start </dev/null >/dev/null 2>&1 3>&- || true
for _ in $(seq 1 30); do
    if su postgres -c "pg_isready -q -h 127.0.0.1 -p 5432"; then break; fi
    sleep 1
done
su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
echo "postgres://postgres:postgres@127.0.0.1:5432/postgres" >&3
