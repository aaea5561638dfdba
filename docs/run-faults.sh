#!/usr/bin/env bash
# Repeated fault trials for `leasehold run` (fault cases 8 and 16).
#
#   docs/run-faults.sh [LEASEHOLD_BINARY] [KILL_TRIALS] [PAUSE_TRIALS] [CONTROL_TRIALS]
#
# kill:    supervisor SIGKILLed while its command has a grandchild, a child that
#          ignores SIGTERM and a child in a new session (setsid). Violation: any
#          of them alive (not a zombie) grace + 1 s after the kill, or the lease
#          not taken over at once (fast takeover) afterwards.
# pause:   supervisor SIGSTOPped past its TTL while another process takes the
#          lease, then SIGCONT. Violation: exit code other than 75, the loss not
#          noticed on the boot clock (message), or the command still alive 3 s
#          after SIGCONT.
# control: healthy runs (all started at once) of 2.5 s with a 3 s TTL and 0.5 s heartbeat. Violation:
#          any exit code other than 0 (a false kill).
set -u
BIN=${1:-target/release/leasehold}
KILLS=${2:-50}
PAUSES=${3:-20}
CONTROLS=${4:-20}
BIN=$(realpath "$BIN")

alive() { # pid: running (not a zombie)?
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

kill_violations=0 kill_max_ms=0 takeover_fail=0
for i in $(seq 1 "$KILLS"); do
    d=$(mktemp -d); cd "$d" || exit 1
    export LEASEHOLD_STORE="sqlite://$d/db"
    "$BIN" run job --grace 500ms -- sh -c "sh -c 'trap \"\" TERM; sleep 60' & echo \$! >> pids;
        sleep 60 & echo \$! >> pids; setsid sleep 60 & echo \$! >> pids; echo \$\$ >> pids; touch started; wait" \
        2>/dev/null &
    sup=$!
    while [ ! -f started ]; do sleep 0.01; done
    sleep 0.$((RANDOM % 5))
    kill -9 "$sup"; wait "$sup" 2>/dev/null
    t0=$(date +%s%N)
    while :; do
        left=0
        for p in $(cat pids); do alive "$p" && left=$((left + 1)); done
        now=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ "$left" = 0 ] && break
        [ "$now" -gt 1500 ] && break
        sleep 0.01
    done
    if [ "$left" != 0 ]; then kill_violations=$((kill_violations + 1)); for p in $(cat pids); do kill -9 "$p" 2>/dev/null; done; fi
    [ "$now" -gt "$kill_max_ms" ] && kill_max_ms=$now
    ok=0
    for _ in $(seq 1 100); do "$BIN" acquire job >/dev/null 2>&1 && { ok=1; break; }; sleep 0.01; done
    [ "$ok" = 1 ] || takeover_fail=$((takeover_fail + 1))
    cd /; rm -rf "$d"
done
echo "kill:    trials=$KILLS survivors_after_grace+1s=$kill_violations max_time_to_all_gone_ms=$kill_max_ms takeover_not_at_once=$takeover_fail"

pause_violations=0
for i in $(seq 1 "$PAUSES"); do
    d=$(mktemp -d); cd "$d" || exit 1
    export LEASEHOLD_STORE="sqlite://$d/db"
    "$BIN" run job --ttl 2s --heartbeat 400ms --grace 500ms -- sh -c 'echo $$ > pid; touch started; exec sleep 60' 2>err &
    sup=$!
    while [ ! -f started ]; do sleep 0.01; done
    kill -STOP "$sup"; sleep 2.6
    "$BIN" acquire job --ttl 60s >/dev/null 2>&1 || pause_violations=$((pause_violations + 1))
    kill -CONT "$sup"; wait "$sup"; rc=$?
    sleep 0.1
    if [ "$rc" != 75 ] || ! grep -q "this process did not run for" err || alive "$(cat pid)"; then
        pause_violations=$((pause_violations + 1))
    fi
    cd /; rm -rf "$d"
done
echo "pause:   trials=$PAUSES violations=$pause_violations"

control_violations=0
pids=()
for i in $(seq 1 "$CONTROLS"); do  # all at once: they share the CPU, as a busy host would
    d=$(mktemp -d)
    (cd "$d" && LEASEHOLD_STORE="sqlite://$d/db" "$BIN" run job --ttl 3s --heartbeat 500ms --grace 500ms -- sleep 2.5 2>/dev/null) &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || control_violations=$((control_violations + 1)); done
echo "control: trials=$CONTROLS false_kills=$control_violations"
