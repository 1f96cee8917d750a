#!/bin/bash
# anchor.sh - prove the client scenarios against a REAL pNFS block-layout
# server before pnfsd serves: one guest runs knfsd + nvmet
# (scenarios/knfsd-server.sh) reachable on the host's loopback through QEMU
# hostfwd, a second guest runs a client scenario against 10.0.2.2 exactly as
# it will against pnfsd.
#
# usage: deploy/vm/anchor.sh [SCENARIO.sh] [VERS...]
#        deploy/vm/anchor.sh --suite [VERS...]
#   SCENARIO.sh  client scenario (default scenarios/block-layout.sh)
#   --suite      run client-suite.sh instead (block layout + restart), i.e.
#                exactly what .ci/run will run against pnfsd
#   VERS         minor versions to run it with (default: 4.1 4.2)
# Env: ANCHOR_NFS_PORT (22049), ANCHOR_NVME_PORT (24420): host ports the
# server guest is forwarded to (bound on 127.0.0.1 only); ANCHOR_LAYOUT
# (block | scsi, see knfsd-server.sh: scsi cannot pass with 6.12's nvmet);
# plus run-guest.sh's.
# Exit 0 only if every client run and the server's checksum check passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
SCEN=$HERE/scenarios/block-layout.sh
# anchor.sh --restart-server SRV_RUN_DIR [ignored]: ask the knfsd guest for
# its next restart and wait until it is done (the command restart-hook.sh runs)
if [[ ${1:-} == --restart-server ]]; then
    n=1
    while [[ -e $2/restart-$n ]]; do n=$((n + 1)); done
    touch "$2/restart-$n"
    for ((i = 0; i < 600; i++)); do [[ -e $2/out/restarted-$n ]] && exit 0; sleep 0.3; done
    exit 1
fi

SUITE=0
if [[ ${1:-} == --suite ]]; then SUITE=1; shift
elif [[ ${1:-} == *.sh ]]; then SCEN=$1; shift; fi
VERSIONS=("$@"); ((${#VERSIONS[@]})) || VERSIONS=(4.1 4.2)
NFS_PORT=${ANCHOR_NFS_PORT:-22049}
NVME_PORT=${ANCHOR_NVME_PORT:-24420}
NQN=nqn.2026-11.org.pnfsd:knfsd-anchor

"$HERE/build-guest.sh" >/dev/null || exit 125
SRV=$VM_DIR/runs/$(date +%Y%m%d-%H%M%S)-knfsd-server-$$
mkdir -p "$SRV/out" "$SRV/checks"
echo "[anchor] server guest: $SRV" >&2
VM_RUN_DIR=$SRV VM_MEM=${ANCHOR_SERVER_MEM:-2560} \
    VM_NETDEV_OPTS="hostfwd=tcp:127.0.0.1:$NFS_PORT-10.0.2.15:2049,hostfwd=tcp:127.0.0.1:$NVME_PORT-10.0.2.15:4420" \
    "$HERE/run-guest.sh" -e NQN="$NQN" -e LAYOUT="${ANCHOR_LAYOUT:-block}" \
    "$HERE/scenarios/knfsd-server.sh" > "$SRV/run-guest.log" 2>&1 &
srvpid=$!
for ((i = 0; i < 240; i++)); do
    [[ -e $SRV/out/server-ready ]] && break
    kill -0 "$srvpid" 2>/dev/null || break
    sleep 0.5
done
if [[ ! -e $SRV/out/server-ready ]]; then
    echo "[anchor] the server guest did not come up" >&2
    touch "$SRV/stop"; wait "$srvpid"; cat "$SRV/run-guest.log" >&2
    exit 125
fi

# restart.sh needs the server restarted on request: the knfsd guest does it
# (see --restart-server below); its requests are numbered across all runs
RESTART_CMD="$HERE/anchor.sh --restart-server $SRV"
HOOK=""
if [[ $(basename "$SCEN") == restart.sh ]]; then
    HOOK="$HERE/restart-hook.sh '$RESTART_CMD'"
fi

rc=0
if ((SUITE)); then
    env NQN="$NQN" NFS_PORT="$NFS_PORT" NVME_PORT="$NVME_PORT" EXPORT=/export LAYOUTS=block \
        VERSIONS="${VERSIONS[*]}" RESTART_VERSIONS="${VERSIONS[*]}" CHECKSUMS_DIR="$SRV/checks" \
        RESTART_CMD="$RESTART_CMD" \
        "$HERE/client-suite.sh" || rc=1
    VERSIONS=()
fi
for v in "${VERSIONS[@]}"; do
    cli=$VM_DIR/runs/$(date +%Y%m%d-%H%M%S)-anchor-client-$v-$$
    echo "[anchor] client $(basename "$SCEN") vers=$v: $cli" >&2
    VM_RUN_DIR=$cli VM_HOST_HOOK=$HOOK "$HERE/run-guest.sh" -e VERS="$v" -e NFS_PORT="$NFS_PORT" \
        -e NVME_PORT="$NVME_PORT" -e NQN="$NQN" -e EXPORT=/export "$SCEN" > "$cli.log" 2>&1
    crc=$?
    grep -E '^(COUNTS (after-fio|end)|CHECK .* FAIL|FIO write|RESULT)' "$cli.log" | sed "s/^/[$v] /"
    [[ -s $cli/out/checksums.txt ]] && cp "$cli/out/checksums.txt" "$SRV/checks/client-$v.sha256"
    echo "[anchor] client vers=$v exit $crc" >&2
    ((crc == 0)) || rc=1
done

touch "$SRV/stop"
wait "$srvpid"; src=$?
grep -E '^(CHECK|SERVER_OPS|RESULT)' "$SRV/run-guest.log" | sed 's/^/[server] /'
((src == 0)) || rc=1
echo "[anchor] $( ((rc == 0)) && echo PASS || echo FAIL )" >&2
exit "$rc"
