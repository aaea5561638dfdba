#!/usr/bin/env bash
# Lease acquire+release and task claim+done per second, 1, 2 and 8 clients:
# through leasehold (testing/leasehold-bench/src/bin/postgres_rate.rs) and the same SQL through pgbench,
# alternated over ROUNDS rounds (which goes first alternates too), with the
# ratio taken within each round: medians and min–max.
# Prints a Markdown table (bench/run includes it in docs/PERFORMANCE.md).
# Usage: bench/run.sh HOST PORT [SECONDS]   (database postgres, user postgres,
# schema "bench" is dropped and re-created). ROUNDS=3 by default. Needs a
# release build of postgres_rate (leasehold-bench) and the leasehold CLI (for `migrate`).
# Issue 15's goals: task claim+done with 8 clients >= 0.9x pgbench; lease
# acquire+release >= 0.95x at every client count.
set -euo pipefail
cd "$(dirname "$0")"
host=$1 port=$2 secs=${3:-10}
rounds=${ROUNDS:-3}
root=../../..
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
url="postgres://postgres@$host:$port/postgres?schema=bench"
psql() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres postgres "$@"; }
psql -c 'DROP SCHEMA IF EXISTS bench CASCADE' 2>/dev/null
"$root/target/release/leasehold" --store "$url" migrate >/dev/null
psql -f setup.sql

ours() { "$root/target/release/postgres_rate" "$url" "$1" "$2" "$secs" | sed 's/.*pairs\/s=//'; }
theirs() {
    PGOPTIONS='-c search_path=bench' "$bin/pgbench" -n -M prepared -h "$host" -p "$port" -U postgres \
        -c "$2" -j "$2" -T "$secs" -f "$1.sql" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | cut -d. -f1
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$rounds"); do
    for what in lease task; do
        for c in 1 2 8; do
            if [ $((r % 2)) = 1 ]; then o=$(ours "$what" "$c"); t=$(theirs "$what" "$c")
            else t=$(theirs "$what" "$c"); o=$(ours "$what" "$c"); fi
            echo "$what $c $o $t" >>"$results"
        done
    done
done

python3 - "$results" "$rounds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
goal = {("task", "8"): 0.9, ("lease", "1"): 0.95, ("lease", "2"): 0.95, ("lease", "8"): 0.95}
print(f"| what ({sys.argv[2]} rounds) | clients | leasehold pairs/s | pgbench pairs/s | ÷ pgbench, same round | goal |")
print("|---|---:|---:|---:|---:|---|")
for what in ("lease", "task"):
    for c in ("1", "2", "8"):
        mine = [(int(o), int(t)) for w, k, o, t in rows if (w, k) == (what, c)]
        ratios = [o / t for o, t in mine]
        med = statistics.median(ratios)
        g = goal.get((what, c))
        verdict = f"{med:.2f} ≥ {g}: **{'met' if med >= g else 'missed'}**" if g else ""
        print(f"| {what} | {c} | {statistics.median(o for o, _ in mine):.0f} | {statistics.median(t for _, t in mine):.0f} "
              f"| {med:.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | {verdict} |")
PY
