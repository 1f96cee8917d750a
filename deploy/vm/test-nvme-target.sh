#!/bin/bash
# test-nvme-target.sh - the Linux NVMe/TCP host against pnfsd's embedded target
# (what the Linux host must accept): starts pnfsd on the host, boots the guest with
# scenarios/nvme-target.sh (nvme discover, connect, dd oflag=direct and
# buffered + sync at the end of the volume, disconnect), then compares the
# bytes in pnfsd's volume file with the patterns the guest wrote — while pnfsd
# still runs, and again after its SIGTERM shutdown (which must be clean).
#
# usage: deploy/vm/test-nvme-target.sh [PNFSD_BIN]   (default target/release/pnfsd)
# Env: VOLUME_SIZE (512M), KVER and the run-guest.sh knobs; TEST_DIR (a fresh
# directory under /var/tmp/pnfsd-vm/nvme-target.*) keeps pnfsd's data and log.
# Exit status: 0 only if the guest scenario passed and every byte matched.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/target/release/pnfsd}
[[ -x $BIN ]] || { echo "test-nvme-target: no pnfsd binary at $BIN (cargo build --release -p pnfsd)" >&2; exit 2; }
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
mkdir -p "$VM_DIR"
T=${TEST_DIR:-$(mktemp -d "$VM_DIR/nvme-target.XXXXXX")}
mkdir -p "$T"
NQN=nqn.2026-11.org.pnfsd:vm-test
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NFS_PORT=$(free_port)
NVME_PORT=$(free_port)
cat > "$T/pnfsd.toml" <<EOF
data_dir = "$T/data"
volume_size = "${VOLUME_SIZE:-512M}"
listen = "127.0.0.1:$NFS_PORT"
nvme_listen = "127.0.0.1:$NVME_PORT"
nvme_nqn = "$NQN"
# the guest reaches the host's loopback as 10.0.2.2 (QEMU user networking)
nvme_advertise = "10.0.2.2:$NVME_PORT"
# The guest drives the namespace as a plain NVMe device, from a host of no NFS client: with
# the layouts enforced (docs/pnfs.md) such a host may only read the data area.
nvme_enforce_layouts = false
EOF

fail() { echo "test-nvme-target: FAIL $*" >&2; exit 1; }
t0=$(date +%s)
"$BIN" serve --config "$T/pnfsd.toml" > "$T/pnfsd.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null' EXIT
for ((i = 0; i < 300; i++)); do
    grep -q "pnfsd ready" "$T/pnfsd.log" && break
    kill -0 $PID 2>/dev/null || { cat "$T/pnfsd.log"; fail "pnfsd exited before ready"; }
    sleep 0.2
done
READY=$(grep -m1 "pnfsd ready" "$T/pnfsd.log") || { cat "$T/pnfsd.log"; fail "pnfsd not ready"; }
echo "test-nvme-target: $READY"
grep -q "nqn $NQN" <<< "$READY" || fail "the ready line does not name the NQN"
UUID=$(sed -n 's/.* uuid \([0-9a-f-]*\).*/\1/p' <<< "$READY" | tr -d -)
VOL=$T/data/volume.img
VOL_BYTES=$(stat -c %s "$VOL")
[[ ${#UUID} == 32 ]] || fail "no volume uuid in the ready line"

RUN=$T/run
rm -rf "$RUN"
VM_RUN_DIR=$RUN "$HERE/run-guest.sh" -e NQN="$NQN" -e NVME_PORT="$NVME_PORT" \
    -e VOL_BYTES="$VOL_BYTES" -e VOL_UUID="$UUID" "$HERE/scenarios/nvme-target.sh"
GUEST_RC=$?

compare() { # compare WHEN: the volume file's bytes at each offset against the guest's pattern
    local f off n bad=0
    [[ -s $RUN/out/offsets.txt ]] || { echo "CHECK host-bytes-$1 FAIL no offsets.txt from the guest"; return 1; }
    while read -r f off; do
        n=$(stat -c %s "$RUN/out/$f")
        if cmp -s <(tail -c +$((off + 1)) "$VOL" | head -c "$n") "$RUN/out/$f"; then
            echo "CHECK host-bytes-$1-${f%.bin} ok $n bytes at $off in $VOL"
        else
            echo "CHECK host-bytes-$1-${f%.bin} FAIL $n bytes at $off differ"; bad=1
        fi
    done < "$RUN/out/offsets.txt"
    return $bad
}
compare running; C1=$?

kill -TERM $PID
wait $PID; PNFSD_RC=$?
trap - EXIT
grep -q "nvme-tcp target stopped" "$T/pnfsd.log" && grep -q "unmounted cleanly" "$T/pnfsd.log"
STOP=$?
echo "CHECK pnfsd-sigterm $([[ $PNFSD_RC == 0 && $STOP == 0 ]] && echo ok || echo FAIL) exit $PNFSD_RC, target stopped, store unmounted"
compare stopped; C2=$?

echo "test-nvme-target: guest rc $GUEST_RC, wall $(($(date +%s) - t0)) s, pnfsd log $T/pnfsd.log, run $RUN"
if [[ $GUEST_RC == 0 && $C1 == 0 && $C2 == 0 && $PNFSD_RC == 0 && $STOP == 0 ]]; then
    echo "RESULT PASS nvme-target (host)"
    exit 0
fi
echo "RESULT FAIL nvme-target (host)"
exit 1
