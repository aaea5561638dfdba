#!/usr/bin/env bash
# Lease acquire+release and task claim+done per second, 1, 2 and 8 clients:
# through leasehold (examples/bench.rs) and the same SQL through pgbench.
# Usage: bench/run.sh HOST PORT [SECONDS]   (database postgres, user postgres,
# schema "bench" is dropped and re-created). Needs a release build of the
# example and the leasehold CLI (for `migrate`).
set -euo pipefail
cd "$(dirname "$0")"
host=$1 port=$2 secs=${3:-10}
root=../../..
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
url="postgres://postgres@$host:$port/postgres?schema=bench"
psql() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres postgres "$@"; }
psql -c 'DROP SCHEMA IF EXISTS bench CASCADE'
"$root/target/release/leasehold" --store "$url" migrate
psql -f setup.sql
printf '| what | clients | leasehold pairs/s | pgbench pairs/s |\n|---|---|---|---|\n'
for what in lease task; do
    for c in 1 2 8; do
        ours=$("$root/target/release/examples/bench" "$url" "$what" "$c" "$secs" | sed 's/.*pairs\/s=//')
        theirs=$(PGOPTIONS='-c search_path=bench' "$bin/pgbench" -n -M prepared -h "$host" -p "$port" -U postgres \
            -c "$c" -j "$c" -T "$secs" -f "$what.sql" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | cut -d. -f1)
        printf '| %s | %s | %s | %s |\n' "$what" "$c" "$ours" "$theirs"
    done
done
