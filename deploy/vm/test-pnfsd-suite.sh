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
# LAYOUTS= (empty) skips the layout runs. CRASH=1|0 (1: crash-write.sh for
# CRASH_LAYOUTS x CRASH_VERSIONS, default "block scsi" x "4.1 4.2", restarts
# CRASH_SIGNALS "KILL KILL+KILL TERM": `ctl crash`). NFS_PORT: the NFS
# port (default a free one; fix it to capture the traffic with tshark); NVME_PORT and
# METRICS_PORT likewise. READ_DELEGATIONS=1|0: `read_delegations = true|false` in pnfsd's
# config (unset: pnfsd's default; docs/delegations.md); WRITE_DELEGATIONS=1|0 likewise for
# `write_delegations`.
# Exit status: client-suite.sh's (0 only if every run passed), 1 if the target refused a
# command of the client's hosts (layout enforcement).
# META=1: also deleg-metadata.sh (the metadata workload, delegations off and on,
# client-suite.sh META_*), last. Its "off" phases turn read and write delegations off;
# its "on" phases turn read delegations on and write delegations as WRITE_DELEGATIONS
# says; it leaves the last "on" setting in the config.
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
NFS_PORT=${NFS_PORT:-$(free_port)}
NVME_PORT=${NVME_PORT:-$(free_port)}
METRICS_PORT=${METRICS_PORT:-$(free_port)}
case ${READ_DELEGATIONS:-} in
    "") DELEG_LINE="" ;;
    1|true) DELEG_LINE="read_delegations = true" ;;
    0|false) DELEG_LINE="read_delegations = false" ;;
    *) echo "test-pnfsd-suite: READ_DELEGATIONS must be 1 or 0" >&2; exit 2 ;;
esac
case ${WRITE_DELEGATIONS:-} in
    "") WRITE_DELEG="" ;;
    1|true) WRITE_DELEG=true; DELEG_LINE+=$'\nwrite_delegations = true' ;;
    0|false) WRITE_DELEG=false; DELEG_LINE+=$'\nwrite_delegations = false' ;;
    *) echo "test-pnfsd-suite: WRITE_DELEGATIONS must be 1 or 0" >&2; exit 2 ;;
esac
cat > "$T/pnfsd.toml" <<EOF
data_dir = "$T/data"
volume_size = "${VOLUME_SIZE:-1G}"
listen = "127.0.0.1:$NFS_PORT"
nvme_listen = "127.0.0.1:$NVME_PORT"
nvme_nqn = "$NQN"
nvme_advertise = "10.0.2.2:$NVME_PORT"
lease_seconds = ${LEASE:-15}
layout_types = ["block"]
metrics_listen = "127.0.0.1:$METRICS_PORT"
$DELEG_LINE
# The guest reaches the host through QEMU's user network: its connections arrive from
# 127.0.0.1, and its root writes where the suites write, so no_root_squash (as a knfsd
# /etc/exports line for a test client, docs/admin-guide.md "Exports").
[[exports]]
path = "/"
[[exports.clients]]
hosts = ["127.0.0.1"]
access = "rw"
squash = "no_root_squash"
EOF
# $T/ctl start | stop SIGNAL | restart N (N = 1: SIGTERM, else SIGKILL) - used as RESTART_CMD
#        | layout block|scsi - SWITCH_LAYOUT_CMD: restart with layout_types ["block"], or
#          ["block", "scsi"] (the Linux client prefers SCSI when both are offered)
#        | crash "SIGS..." I - CRASH_CMD: restart I of the list SIGS (KILL, TERM, or KILL+KILL:
#          two restarts in a row, the second 2 s after the first start, while the client is
#          still recovering), then wait until pnfsd has answered a LAYOUTCOMMIT with OK
#          (its metrics: layoutcommits - errors > 0) and print FIRST_COMMIT with the time.
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
# the delegation counters of this pnfsd instance, appended to delegs.txt before it stops
# (a restart starts them at 0 again; the suite prints their sum)
deleg_counts() {
    python3 - >> "$T/delegs.txt" <<'PY' 2>/dev/null
import urllib.request
m = {}
for l in urllib.request.urlopen("http://127.0.0.1:$METRICS_PORT/metrics", timeout=5).read().decode().splitlines():
    if l and not l.startswith("#"):
        k, v = l.split(" ")[:2]
        m[k] = float(v)
print("DELEGS " + " ".join("%s=%d" % (k, m.get("pnfsd_delegations_%s_total" % k, 0)) for k in ("granted", "recalled", "revoked")))
PY
}
stop() { p=\$(cat "$T/pid"); deleg_counts; kill -"\$1" "\$p"; while kill -0 "\$p" 2>/dev/null; do sleep 0.1; done; }
# set_key KEY VALUE: the config's top-level KEY = VALUE (added after metrics_listen if
# absent); an empty VALUE removes the line (pnfsd's default)
set_key() {
    sed -i "/^\$1 = /d" "$T/pnfsd.toml"
    [[ -z \$2 ]] || sed -i "/^metrics_listen = /a \$1 = \$2" "$T/pnfsd.toml"
}
# LAYOUTCOMMITs answered OK since pnfsd started (its counters start at 0)
commits_ok() {
    python3 - <<'PY' 2>/dev/null || echo 0
import urllib.request
m = {}
for l in urllib.request.urlopen("http://127.0.0.1:$METRICS_PORT/metrics", timeout=5).read().decode().splitlines():
    if l and not l.startswith("#"):
        k, v = l.split(" ")[:2]
        m[k] = float(v)
print(int(m.get("pnfsd_layoutcommits_total", 0) - m.get("pnfsd_layoutcommit_errors_total", 0)))
PY
}
crash() {
    local list=(\$1) sigs ss k t0 t1 now
    sigs=\${list[\$((\$2 - 1))]:-KILL}
    IFS=+ read -ra ss <<< "\$sigs"
    t0=\$(date +%s%N)
    for ((k = 0; k < \${#ss[@]}; k++)); do
        ((k == 0)) || sleep 2      # the next restart in a row: the client is mid-recovery
        stop "\${ss[k]}"; start || return 1
        t1=\$(date +%s%N)
    done
    while (( \$(date +%s%N) - t1 < \${CRASH_COMMIT_WAIT:-120} * 1000000000 )); do
        if (( \$(commits_ok) > 0 )); then
            now=\$(date +%s%N)
            awk -v r="\$2" -v s="\$sigs" -v a=\$((now - t0)) -v b=\$((now - t1)) \\
                'BEGIN { printf "FIRST_COMMIT restart=%s signal=%s seconds=%.1f after_ready=%.1f\\n", r, s, a / 1e9, b / 1e9 }'
            return 0
        fi
        sleep 0.1
    done
    echo "FIRST_COMMIT restart=\$2 signal=\$sigs seconds=none (no LAYOUTCOMMIT answered OK within \${CRASH_COMMIT_WAIT:-120} s of the restart)"
    return 1
}
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
    crash) crash "\$2" "\$3" ;;
    delegs)
        # deleg-metadata.sh's phases: no delegations for odd \$2; for even, read delegations
        # and write delegations as WRITE_DELEGATIONS set them (unset: pnfsd's default)
        if (( \$2 % 2 == 0 )); then
            set_key read_delegations true; set_key write_delegations "$WRITE_DELEG"
        else
            set_key read_delegations false; set_key write_delegations false
        fi
        stop TERM; start ;;
esac
EOF
chmod +x "$T/ctl"
"$T/ctl" start || { cat "$T/pnfsd.log"; exit 1; }
trap '"$T/ctl" stop TERM' EXIT
grep -m1 "pnfsd ready" "$T/pnfsd.log"
EXTRA_ENV=()
[[ ${RESTART:-1} == 0 ]] || EXTRA_ENV=(RESTART_CMD="$T/ctl restart")
[[ ${CRASH:-1} == 0 ]] || EXTRA_ENV+=(CRASH_CMD="$T/ctl crash")
[[ ${META:-0} == 0 ]] || EXTRA_ENV+=(META_CMD="$T/ctl delegs")
NFS_CAT=${NFS_CAT:-$(dirname "$BIN")/nfs-cat}
if [[ $NFS_CAT != none ]]; then
    [[ -x $NFS_CAT ]] || { echo "test-pnfsd-suite: no nfs-cat at $NFS_CAT (cargo build --release -p client-tests --bin nfs-cat, or NFS_CAT=none)" >&2; exit 2; }
    EXTRA_ENV+=(CAT_CMD="$(printf '%q' "$NFS_CAT") 127.0.0.1:$NFS_PORT")
fi
env NQN="$NQN" METRICS_PORT="$METRICS_PORT" SWITCH_LAYOUT_CMD="$T/ctl layout" NFS_PORT="$NFS_PORT" NVME_PORT="$NVME_PORT" LAYOUTS="${LAYOUTS-block}" \
    VERSIONS="${VERSIONS:-4.1 4.2}" GUIDE="${GUIDE:-0}" "${EXTRA_ENV[@]}" "$HERE/client-suite.sh"
rc=$?
"$T/ctl" stop TERM
trap - EXIT
# The target enforces the layouts (docs/pnfs.md "The target enforces the layouts"): the real
# client must never trip it. Each refused command logs "target host refused by the gate".
refused=$(grep -c "target host refused by the gate" "$T/pnfsd.log")
if (( refused > 0 )); then
    grep "target host refused by the gate" "$T/pnfsd.log" | head -n 20
    echo "test-pnfsd-suite: FAIL: the target refused $refused command(s) of the client's hosts"
    rc=1
fi
# Delegations the server granted, recalled and revoked over the whole suite (every instance).
[[ -s $T/delegs.txt ]] && awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); n[kv[1]] += kv[2] } }
    END { printf "test-pnfsd-suite: delegations granted=%d recalled=%d revoked=%d (%d pnfsd instances)\n", n["granted"], n["recalled"], n["revoked"], NR }' "$T/delegs.txt"
grep -E "ERROR|WARN|panick" "$T/pnfsd.log" | tail -n 20
echo "test-pnfsd-suite: suite exit $rc; pnfsd log $T/pnfsd.log"
exit $rc
