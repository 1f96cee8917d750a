#!/bin/bash
# test-pnfsd-suite.sh - client-suite.sh (the Linux pNFS client scenarios) against
# a pnfsd started here on the host, with its embedded NVMe/TCP target as the
# data path; the restart scenario restarts that pnfsd (1 = SIGTERM, 2 = SIGKILL).
#
# usage: deploy/vm/test-pnfsd-suite.sh [PNFSD_BIN]   (default target/release/pnfsd)
# Env: LAYOUTS (block), VERSIONS (4.1 4.2), RESTART=1|0 (1: also restart.sh for
# RESTART_VERSIONS, default 4.1), EXPECT_PNFS (unset: the scenarios' default 1;
# 0 reports the layout checks as NOTE lines, e.g. before pnfsd serves layouts),
# VOLUME_SIZE (1G), LEASE (15 s: also the grace period after each restart),
# TEST_DIR (pnfsd's data, log and control script; a fresh /var/tmp/pnfsd-vm/suite.*),
# NFS_CAT (the nfs-cat binary next to PNFSD_BIN: CAT_CMD, the host reads every file
# whose checksum the guest reported through pnfsd's MDS and compares; NFS_CAT=none
# skips that).
# LAYOUTS "block scsi": the scsi runs restart pnfsd with layout_types ["block",
# "scsi"] (SWITCH_LAYOUT_CMD); the restart scenario runs on ["block"] again.
# Exit status: client-suite.sh's (0 only if every run passed).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$(realpath "${1:-$ROOT/target/release/pnfsd}")
[[ -x $BIN ]] || { echo "test-pnfsd-suite: no pnfsd binary at $BIN" >&2; exit 2; }
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
mkdir -p "$VM_DIR"
T=${TEST_DIR:-$(mktemp -d "$VM_DIR/suite.XXXXXX")}
mkdir -p "$T"
NQN=nqn.2026-11.org.pnfsd:vm-suite
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NFS_PORT=$(free_port)
NVME_PORT=$(free_port)
cat > "$T/pnfsd.toml" <<EOF
data_dir = "$T/data"
volume_size = "${VOLUME_SIZE:-1G}"
listen = "127.0.0.1:$NFS_PORT"
nvme_listen = "127.0.0.1:$NVME_PORT"
nvme_nqn = "$NQN"
nvme_advertise = "10.0.2.2:$NVME_PORT"
lease_seconds = ${LEASE:-15}
layout_types = ["block"]
EOF
# $T/ctl start | stop SIGNAL | restart N (N = 1: SIGTERM, else SIGKILL) - used as RESTART_CMD
#        | layout block|scsi - SWITCH_LAYOUT_CMD: restart with layout_types ["block"], or
#          ["block", "scsi"] (the Linux client prefers SCSI when both are offered).
cat > "$T/ctl" <<EOF
#!/bin/bash
set -u
start() {
    touch "$T/pnfsd.log"
    n=\$(grep -c "pnfsd ready" "$T/pnfsd.log")
    "$BIN" serve --config "$T/pnfsd.toml" >> "$T/pnfsd.log" 2>&1 &
    echo \$! > "$T/pid"
    for ((i = 0; i < 300; i++)); do
        (( \$(grep -c "pnfsd ready" "$T/pnfsd.log") > n )) && return 0
        kill -0 \$(cat "$T/pid") 2>/dev/null || { echo "pnfsd exited" >&2; return 1; }
        sleep 0.2
    done
    return 1
}
stop() { p=\$(cat "$T/pid"); kill -"\$1" "\$p"; while kill -0 "\$p" 2>/dev/null; do sleep 0.1; done; }
case \$1 in
    start) start ;;
    stop) stop "\${2:-TERM}" ;;
    restart) if [[ \$2 == 1 ]]; then stop TERM; else stop KILL; fi; start ;;
    layout)
        case \$2 in block) lt='["block"]' ;; scsi) lt='["block", "scsi"]' ;; *) exit 2 ;; esac
        # already so: no restart (each one costs a grace period)
        grep -qxF "layout_types = \$lt" "$T/pnfsd.toml" && exit 0
        sed -i "s/^layout_types = .*/layout_types = \$lt/" "$T/pnfsd.toml"
        stop TERM; start ;;
esac
EOF
chmod +x "$T/ctl"
"$T/ctl" start || { cat "$T/pnfsd.log"; exit 1; }
trap '"$T/ctl" stop TERM' EXIT
grep -m1 "pnfsd ready" "$T/pnfsd.log"
EXTRA_ENV=()
[[ ${RESTART:-1} == 0 ]] || EXTRA_ENV=(RESTART_CMD="$T/ctl restart")
NFS_CAT=${NFS_CAT:-$(dirname "$BIN")/nfs-cat}
if [[ $NFS_CAT != none ]]; then
    [[ -x $NFS_CAT ]] || { echo "test-pnfsd-suite: no nfs-cat at $NFS_CAT (cargo build --release -p client-tests --bin nfs-cat, or NFS_CAT=none)" >&2; exit 2; }
    EXTRA_ENV+=(CAT_CMD="$(printf '%q' "$NFS_CAT") 127.0.0.1:$NFS_PORT")
fi
env NQN="$NQN" SWITCH_LAYOUT_CMD="$T/ctl layout" NFS_PORT="$NFS_PORT" NVME_PORT="$NVME_PORT" LAYOUTS="${LAYOUTS:-block}" \
    VERSIONS="${VERSIONS:-4.1 4.2}" GUIDE="${GUIDE:-0}" "${EXTRA_ENV[@]}" "$HERE/client-suite.sh"
rc=$?
"$T/ctl" stop TERM
trap - EXIT
grep -E "ERROR|WARN|panick" "$T/pnfsd.log" | tail -n 20
echo "test-pnfsd-suite: suite exit $rc; pnfsd log $T/pnfsd.log"
exit $rc
