#!/bin/bash
# test-failover.sh - MDS failover with the Linux pNFS client (docs/ha.md "Tests and figures").
#
# usage: deploy/vm/test-failover.sh [PNFSD_BIN]   (default target/release/pnfsd)
#
# Per run, on the host: a storage node (`pnfsd target`), MDS A (`pnfsd serve` on the target's
# namespaces, holding the reservation), and the floating address (float-proxy.py: the guest's
# NFS and metrics ports, forwarded to the active MDS). In the guest, crash-write.sh: fio writes
# through the layout with fsync after each write and --verify. When fio is mid-write the host
# (`ctl failover`) takes the address down, stops A with the run's signal, starts MDS B with
# --takeover on the same target, brings the address up on B and waits for B's first
# LAYOUTCOMMIT answered OK. With SIGSTOP it then resumes A, which must find itself fenced and
# exit non-zero, the target refusing or never seeing a write of it. After the guest, B stops,
# A fails back (--takeover), and the host reads every file the guest checksummed through A.
#
# Runs (FAILOVER_RUNS, default "block:KILL scsi:KILL block:STOP"), LAYOUT:SIGNAL:
#   block - the block layout on a split volume: the metadata member on a namespace of its own
#           (the MDS hosts' alone, held WRITE EXCLUSIVE), the data member for the clients;
#   scsi  - the SCSI layout on one namespace, held EXCLUSIVE ACCESS REGISTRANTS ONLY (the
#           clients register their keys).
# Env: VERS (4.2), LEASE (15 s, also the grace period), VOLUME_SIZE (1G), FIO_SIZE (64m),
#      MDS_WRITE_LIMIT (1 MiB: NFS WRITE bytes after the failover), TEST_DIR, NFS_CAT (the
#      nfs-cat binary next to PNFSD_BIN).
# Checks, each failing the run: fio verified across the failover (crash-write.sh), the
# layout still in use after it and NFS WRITE bytes under MDS_WRITE_LIMIT, B's first
# LAYOUTCOMMIT within 2 x LEASE of A's stop, A fenced (non-zero exit, "fenced" in its log) and
# none of A's writes reaching the volume after its stop (the target's per-host counter),
# a start of B without --takeover refused while A holds the volume, and the bytes the guest
# checksummed served by B and, after failback, by A.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$(realpath "${1:-$ROOT/target/release/pnfsd}")
[[ -x $BIN ]] || { echo "test-failover: no pnfsd binary at $BIN" >&2; exit 2; }
NFS_CAT=${NFS_CAT:-$(dirname "$BIN")/nfs-cat}
[[ -x $NFS_CAT ]] || { echo "test-failover: no nfs-cat at $NFS_CAT (cargo build --release -p client-tests --bin nfs-cat)" >&2; exit 2; }
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
mkdir -p "$VM_DIR"
T=${TEST_DIR:-$(mktemp -d "$VM_DIR/failover.XXXXXX")}
mkdir -p "$T"
LEASE=${LEASE:-15}
VERS=${VERS:-4.2}
NQN=nqn.2026-11.org.pnfsd:vm-failover
MDS_A=nqn.2026-11.org.pnfsd:mds-a
MDS_B=nqn.2026-11.org.pnfsd:mds-b
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rc=0
SUMMARY=()
for r in ${FAILOVER_RUNS:-block:KILL scsi:KILL block:STOP}; do
    layout=${r%%:*} sig=${r#*:}
    D=$T/$layout-${sig,,}
    mkdir -p "$D"
    TPORT=$(free_port) TMPORT=$(free_port) PA=$(free_port) PB=$(free_port) MA=$(free_port) \
        MB=$(free_port) PF=$(free_port) PFM=$(free_port)
    url() { echo "nvme-tcp://127.0.0.1:$TPORT/$NQN?nsid=$1&timeout=5&hostnqn=$2"; }
    case $layout in
        block)
            "$BIN" mkfs --metadata-volume "$D/meta.img" --size "${VOLUME_SIZE:-1G}" "$D/data.img" > "$D/mkfs.log" 2>&1 ||
                { cat "$D/mkfs.log"; exit 1; }
            namespaces="[[target.namespaces]]
path = \"$D/meta.img\"
hosts = [\"$MDS_A\", \"$MDS_B\"]
[[target.namespaces]]
path = \"$D/data.img\""
            volumes() { printf 'volume = "%s"\nmetadata_volume = "%s"\nlayout_types = ["block"]\n' "$(url 2 "$1")" "$(url 1 "$1")"; }
            ;;
        scsi)
            "$BIN" mkfs --size "${VOLUME_SIZE:-1G}" "$D/vol.img" > "$D/mkfs.log" 2>&1 || { cat "$D/mkfs.log"; exit 1; }
            namespaces="[[target.namespaces]]
path = \"$D/vol.img\""
            volumes() { printf 'volume = "%s"\nlayout_types = ["block", "scsi"]\n' "$(url 1 "$1")"; }
            ;;
        *) echo "test-failover: unknown layout $layout in FAILOVER_RUNS" >&2; exit 2 ;;
    esac
    cat > "$D/target.toml" <<EOF
[target]
listen = "127.0.0.1:$TPORT"
nqn = "$NQN"
advertise = "10.0.2.2:$TPORT"
mds_hosts = ["$MDS_A", "$MDS_B"]
state_dir = "$D/target-state"
metrics_listen = "127.0.0.1:$TMPORT"
$namespaces
EOF
    for n in a b; do
        if [[ $n == a ]]; then host=$MDS_A port=$PA mport=$MA key=pnfsdMDA; else host=$MDS_B port=$PB mport=$MB key=pnfsdMDB; fi
        cat > "$D/$n.toml" <<EOF
data_dir = "$D/data-$n"
listen = "127.0.0.1:$port"
metrics_listen = "127.0.0.1:$mport"
$(volumes "$host")
reservation_key = "$key"
lease_seconds = $LEASE
[[exports]]
path = "/"
[[exports.clients]]
hosts = ["127.0.0.1"]
access = "rw"
squash = "no_root_squash"
EOF
    done
    echo "$PA $MA" > "$D/float"
    # $D/ctl start a|b [--takeover] | stop a|b SIGNAL | failover SIGNAL I (CRASH_CMD)
    cat > "$D/ctl" <<EOF
#!/bin/bash
set -u
ms() { echo \$((\$(date +%s%N) / 1000000)); }
# metric URL NAME: the value of series NAME (its full text, labels included) or 0
metric() {
    python3 - "\$1" "\$2" <<'PY' 2>/dev/null || echo 0
import sys, urllib.request
t = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(int(sum(float(l.rsplit(" ", 1)[1]) for l in t.splitlines() if l.rsplit(" ", 1)[0] == sys.argv[2])))
PY
}
start() { # start a|b [--takeover]: waits for "pnfsd ready"; a.rc gets the exit status
    local n=\$1; shift
    touch "$D/\$n.log"; rm -f "$D/\$n.rc"
    local c; c=\$(grep -c "pnfsd ready" "$D/\$n.log")
    ( "$BIN" serve --config "$D/\$n.toml" "\$@" >> "$D/\$n.log" 2>&1; echo \$? > "$D/\$n.rc" ) &
    for ((i = 0; i < 600; i++)); do
        (( \$(grep -c "pnfsd ready" "$D/\$n.log") > c )) && return 0
        [[ -e "$D/\$n.rc" ]] && { echo "MDS \$n exited with \$(cat "$D/\$n.rc")"; tail -n 5 "$D/\$n.log"; return 1; }
        sleep 0.1
    done
    return 1
}
pid() { pgrep -f -- "serve --config $D/\$1.toml" | head -n1; }
stop() { # stop a|b SIGNAL: waits for the exit
    local p; p=\$(pid \$1); [[ -n \$p ]] || return 0
    kill -"\$2" "\$p"
    while kill -0 "\$p" 2>/dev/null; do sleep 0.1; done
}
float() { echo "\$1" > "$D/float"; kill -HUP \$(cat "$D/proxy.pid"); }
failover() {
    local sig=\$1 t0 t1 t2 a_writes
    t0=\$(ms)
    float none                      # the address leaves A's node first
    kill -"\$sig" \$(pid a)
    [[ \$sig == STOP ]] || while [[ -n \$(pid a) ]]; do sleep 0.05; done
    a_writes=\$(metric "http://127.0.0.1:$TMPORT/metrics" 'pnfsd_target_mds_writes_total{host="$MDS_A"}')
    start b --takeover || return 1
    t1=\$(ms)
    float "$PB $MB"
    while (( \$(ms) - t1 < 120000 )); do
        (( \$(metric http://127.0.0.1:$MB/metrics pnfsd_layoutcommits_total) - \$(metric http://127.0.0.1:$MB/metrics pnfsd_layoutcommit_errors_total) > 0 )) && break
        sleep 0.1
    done
    t2=\$(ms)
    awk -v s="\$sig" -v a=\$((t2 - t0)) -v b=\$((t2 - t1)) -v r=\$((t1 - t0)) \\
        'BEGIN { printf "FIRST_COMMIT restart=1 signal=%s seconds=%.1f after_ready=%.1f takeover_ready=%.1f\\n", s, a / 1e3, b / 1e3, r / 1e3 }'
    (( t2 - t1 < 120000 )) || { echo "FAILOVER no LAYOUTCOMMIT answered OK by B within 120 s"; return 1; }
    (( t2 - t0 <= 2 * $LEASE * 1000 )) || { echo "FAILOVER FAIL first LAYOUTCOMMIT on B \$(( (t2 - t0) / 1000 )) s after A stopped: over 2 x lease ($((2 * LEASE)) s)"; return 1; }
    if [[ \$sig == STOP ]]; then
        kill -CONT \$(pid a)
        for ((i = 0; i < 300; i++)); do [[ -e "$D/a.rc" ]] && break; sleep 0.1; done
        [[ -e "$D/a.rc" ]] || { echo "FAILOVER FAIL A still runs 30 s after SIGCONT"; return 1; }
        local arc; arc=\$(cat "$D/a.rc")
        echo "FENCED a exit=\$arc \$(grep -m1 -o 'fenced.*' "$D/a.log" | cut -c1-160)"
        (( arc != 0 )) && grep -q fenced "$D/a.log" || { echo "FAILOVER FAIL A exited \$arc without saying it was fenced"; return 1; }
    fi
    local after; after=\$(metric "http://127.0.0.1:$TMPORT/metrics" 'pnfsd_target_mds_writes_total{host="$MDS_A"}')
    echo "FENCE a_writes_after_stop=\$((after - a_writes)) reservation_conflicts=\$(metric http://127.0.0.1:$TMPORT/metrics 'pnfsd_nvme_reservation_conflicts_total{nsid="1"}')"
    (( after == a_writes )) || { echo "FAILOVER FAIL the target took \$((after - a_writes)) write(s) of A after its stop"; return 1; }
}
case \$1 in
    start) shift; start "\$@" ;;
    stop) stop "\$2" "\$3" ;;
    failover) failover "\$2" ;;
    *) exit 2 ;;
esac
EOF
    chmod +x "$D/ctl"
    "$BIN" target --config "$D/target.toml" > "$D/target.log" 2>&1 &
    tpid=$!
    for ((i = 0; i < 300; i++)); do grep -q "pnfsd target ready" "$D/target.log" && break; sleep 0.1; done
    grep -q "pnfsd target ready" "$D/target.log" || { cat "$D/target.log"; exit 1; }
    python3 "$HERE/float-proxy.py" "$D/float" "$PF" "$PFM" > "$D/proxy.log" 2>&1 &
    echo $! > "$D/proxy.pid"
    "$D/ctl" start a || { cat "$D/a.log"; exit 1; }
    # a second MDS without --takeover while A holds the volume: refused
    if "$BIN" serve --config "$D/b.toml" > "$D/b-refused.log" 2>&1; then
        echo "test-failover: FAIL: B started without --takeover on the volume A holds"; rc=1
        "$D/ctl" stop b TERM
    else
        echo "[failover] $layout:$sig B without --takeover refused: $(grep -m1 -o 'held by another MDS.*' "$D/b-refused.log" | cut -c1-120)"
    fi
    PNFSD_VM_DIR=$VM_DIR NQN=$NQN NFS_PORT=$PF NVME_PORT=$TPORT METRICS_PORT=$PFM LAYOUTS= \
        CRASH_CMD="$D/ctl failover" CRASH_SIGNALS=$sig CRASH_LAYOUTS=$layout CRASH_VERSIONS=$VERS \
        CRASH_NAME=failover-${sig,,} CRASH_FIO_SIZE=${FIO_SIZE:-64m} \
        CRASH_EXTRA_ENV="MDS_WRITE_LIMIT=${MDS_WRITE_LIMIT:-1048576} DENIED_NAMESPACE=$([[ $layout == block ]] && echo 1 || echo 0)" \
        CAT_CMD="$(printf '%q' "$NFS_CAT") 127.0.0.1:$PF" \
        "$HERE/client-suite.sh" > "$D/suite.log" 2>&1
    r=$?
    grep -E '^failover|^\[failover' "$D/suite.log" >&2
    line=$(grep -E "^failover-" "$D/suite.log" | tail -n1)
    # Failback: B stops, A takes the volume back and serves every byte the guest checksummed.
    "$D/ctl" stop b TERM
    sums=$(ls -t "$VM_DIR"/runs/*-suite-failover-"${sig,,}-$layout-$VERS"-*/out/checksums.txt 2>/dev/null | head -n1)
    if "$D/ctl" start a --takeover; then
        n=0 ok=0
        while read -r sum path; do
            n=$((n + 1))
            got=$("$NFS_CAT" "127.0.0.1:$PA" "$path" | sha256sum | cut -d' ' -f1)
            [[ $got == "$sum" ]] && ok=$((ok + 1))
        done < "${sums:-/dev/null}"
        ((n > 0 && ok == n)) || { echo "[failover] $layout:$sig FAIL failback: $ok of $n files as the guest wrote them"; r=1; }
        echo "[failover] $layout:$sig failback to A: $ok/$n files as the guest wrote them"
        "$D/ctl" stop a TERM
    else
        echo "[failover] $layout:$sig FAIL: A did not start again (failback)"; r=1
    fi
    kill "$(cat "$D/proxy.pid")" "$tpid" 2>/dev/null
    wait "$tpid" 2>/dev/null
    grep -hE "ERROR|panick" "$D/a.log" "$D/b.log" "$D/target.log" | grep -v fenced | tail -n 5 | sed "s/^/[failover] $layout:$sig log: /"
    ((r == 0)) || rc=1
    SUMMARY+=("$(printf '%-12s %-4s %s' "$layout:$sig" "$( ((r == 0)) && echo PASS || echo FAIL)" "$(cut -d' ' -f3- <<< "$line")")")
done
echo
echo "===== MDS failover (kernel $(basename "$("$HERE/build-guest.sh" 2>/dev/null | tail -n1)"), lease $LEASE s) ====="
printf '%s\n' "${SUMMARY[@]}"
exit $rc
