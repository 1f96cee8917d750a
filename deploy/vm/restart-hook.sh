#!/bin/bash
# restart-hook.sh - host half of scenarios/restart.sh.
#
# usage: deploy/vm/restart-hook.sh 'RESTART_COMMAND' RUN_DIR
#   (run-guest.sh starts it as  $VM_HOST_HOOK RUN_DIR  in the background)
# For i = 1, 2, ...: waits for RUN_DIR/out/restart-ready-<i> (the guest wrote
# and fsynced, and holds the file open), runs `RESTART_COMMAND <i>` (it must
# stop the server - SIGTERM or SIGKILL, the command decides from <i> - and
# start it again), then writes its exit status to RUN_DIR/restart-done-<i>. Ends when the guest
# has powered off (RUN_DIR/out/rc exists) or after HOOK_TIMEOUT (900 s).
set -uo pipefail
[[ $# -eq 2 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
CMD=$1 RUN=$2
end=$(( $(date +%s) + ${HOOK_TIMEOUT:-900} ))
i=1
while (( $(date +%s) < end )) && [[ ! -e $RUN/out/rc ]]; do
    if [[ -e $RUN/out/restart-ready-$i ]]; then
        echo "[restart-hook] restart $i: $CMD $i" >&2
        t0=$(date +%s%N)
        bash -c "$CMD $i" >> "$RUN/restart-hook.log" 2>&1
        crc=$?
        echo "[restart-hook] restart $i done (exit $crc) in $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2
        echo "$crc" > "$RUN/restart-done-$i"   # the guest fails the run unless 0
        i=$((i + 1))
    fi
    sleep 0.3
done
