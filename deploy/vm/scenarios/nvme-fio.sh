#!/bin/bash
# nvme-fio.sh - fio (io_uring engine) from the real Linux host in the guest,
# against three things holding the same 256 MiB RAM disk (/dev/ram0, brd):
#   local   fio on /dev/ram0 itself (O_DIRECT)
#   pnfsd   our target (/host/nvme-target, the nvme-tcp crate's `target` example,
#           opening /dev/ram0 with O_DIRECT as `pnfsd serve` opens its volume),
#           nvme connect over the guest's loopback
#   nvmet   Linux nvmet-tcp exporting /dev/ram0 (bdev backend), same loopback
# Both targets run in the same guest under the same emulation, so their ratio is
# the target's cost and nothing else. The host half is deploy/vm/bench-nvme-fio.sh.
#
# Env: ROUNDS (3), RUNTIME (5 s per job), JOBS ("randread:1 randwrite:1
# randread:32 randwrite:32"), BS (4k); NVME_TCP_NO_URING=1 runs our target
# without io_uring (its fallback path); TRACE=1 runs it under strace -c -f
# (syscall counts in out/strace.txt: slows it, for counting only).
# Output: out/fio.tsv (one line per side x job x round: side job qd round iops
# clat_mean_us), the median table on stdout (TABLE lines), the usual CHECK/RESULT lines;
# with /host/nvme-echo (the crate's `echo` example), the loopback echo floor in the guest
# (FLOOR lines, out/echo.txt).
SCENARIO=nvme-fio
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-5}
BS=${BS:-4k}
JOBS=${JOBS:-"randread:1 randwrite:1 randread:32 randwrite:32"}
OUT=/host/out
NQN_P=nqn.2026-11.org.pnfsd:fio
NQN_K=nqn.2026-11.org.pnfsd:fio-nvmet
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) cpus=$(nproc) rounds=$ROUNDS runtime=$RUNTIME bs=$BS no_uring=${NVME_TCP_NO_URING:-0}"

modprobe brd rd_nr=1 rd_size=262144 || die "brd"
modprobe -a nvmet nvmet_tcp nvme_tcp || die "nvmet / nvme_tcp modules"
dd if=/dev/zero of=/dev/ram0 bs=1M count=256 oflag=direct status=none || die "fill /dev/ram0"
dmesg_mark

step "pnfsd's target on 127.0.0.1:4421"
[[ -x /host/nvme-target ]] || die "no /host/nvme-target (VM_FILES)"
TRACE_CMD=()
[[ ${TRACE:-0} == 1 ]] && TRACE_CMD=(strace -c -f -o "$OUT/strace.txt")
"${TRACE_CMD[@]}" /host/nvme-target /dev/ram0 127.0.0.1:4421 "$NQN_P" --direct > "$OUT/target.log" 2>&1 &
TPID=$!
for ((i = 0; i < 100; i++)); do grep -q ready "$OUT/target.log" && break; sleep 0.1; done
grep -q ready "$OUT/target.log"; check target-ready $? "$(head -c 200 "$OUT/target.log")"

step "nvmet-tcp on 127.0.0.1:4422"
C=/sys/kernel/config/nvmet
mkdir "$C/subsystems/$NQN_K" "$C/subsystems/$NQN_K/namespaces/1" "$C/ports/1" || die "configfs"
echo 1 > "$C/subsystems/$NQN_K/attr_allow_any_host"
echo /dev/ram0 > "$C/subsystems/$NQN_K/namespaces/1/device_path"
echo 1 > "$C/subsystems/$NQN_K/namespaces/1/enable" || die "nvmet namespace enable"
echo tcp > "$C/ports/1/addr_trtype"; echo ipv4 > "$C/ports/1/addr_adrfam"
echo 127.0.0.1 > "$C/ports/1/addr_traddr"; echo 4422 > "$C/ports/1/addr_trsvcid"
ln -s "$C/subsystems/$NQN_K" "$C/ports/1/subsystems/$NQN_K" || die "nvmet port"

dev_of() { # dev_of NQN: the namespace block device of the controller for NQN
    local d
    for d in /sys/block/nvme*n*; do
        [[ $(basename "$d") =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
        [[ $(cat "$d/device/subsysnqn" 2>/dev/null) == "$1" ]] && { echo "/dev/$(basename "$d")"; return 0; }
    done
    return 1
}
attach() { # attach PORT NQN
    nvme connect -t tcp -a 127.0.0.1 -s "$1" -n "$2" >/dev/null || return 1
    for ((i = 0; i < 50; i++)); do dev_of "$2" >/dev/null && return 0; sleep 0.2; done
    return 1
}
attach 4421 "$NQN_P"; check connect-pnfsd $? "$(dev_of "$NQN_P")"
attach 4422 "$NQN_K"; check connect-nvmet $? "$(dev_of "$NQN_K")"
DEV_P=$(dev_of "$NQN_P") DEV_K=$(dev_of "$NQN_K")
[[ -n $DEV_P && -n $DEV_K ]] || die "namespaces missing"
nvme list

fio_iops() { # fio_iops DEV RW QD -> "iops clat_mean_us"
    fio --name=j --filename="$1" --ioengine=io_uring --direct=1 --rw="$2" --bs="$BS" \
        --iodepth="$3" --runtime="$RUNTIME" --time_based --size=256M --norandommap \
        --randrepeat=0 --output-format=json 2> "$OUT/fio.err" |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; k="read" if j["read"]["io_bytes"] else "write"; print("%.0f %.1f" % (j[k]["iops"], j[k]["clat_ns"]["mean"]/1000))'
}
: > "$OUT/fio.tsv"
SIDES=(local pnfsd nvmet)
for ((r = 1; r <= ROUNDS; r++)); do
    for job in $JOBS; do
        rw=${job%:*} qd=${job#*:}
        for ((k = 0; k < 3; k++)); do
            side=${SIDES[$(((k + r) % 3))]} # rotate which side goes first
            case $side in local) dev=/dev/ram0 ;; pnfsd) dev=$DEV_P ;; nvmet) dev=$DEV_K ;; esac
            res=$(fio_iops "$dev" "$rw" "$qd") || res="0 0"
            echo "$side $rw $qd $r $res" | tee -a "$OUT/fio.tsv"
        done
    done
    echo "ROUND $r done, guest load $(cut -d' ' -f1-3 /proc/loadavg)"
done
python3 - "$OUT/fio.tsv" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
cells = {}
for side, rw, qd, r, iops, lat in rows:
    cells.setdefault((rw, int(qd)), {}).setdefault(side, {})[int(r)] = (float(iops), float(lat))
print("TABLE %-9s %3s %9s %9s %9s %11s %11s %9s %9s" % ("job", "qd", "local", "pnfsd", "nvmet", "pnfsd/nvmet", "pnfsd/local", "lat-p us", "lat-k us"))
for (rw, qd), s in sorted(cells.items(), key=lambda x: (x[0][1], x[0][0])):
    med = lambda side, i=0: st.median(v[i] for v in s.get(side, {0: (0, 0)}).values())
    rounds = sorted(set(s.get("pnfsd", {})) & set(s.get("nvmet", {})) & set(s.get("local", {})))
    rk = st.median(s["pnfsd"][r][0] / s["nvmet"][r][0] for r in rounds if s["nvmet"][r][0]) if rounds else 0
    rl = st.median(s["pnfsd"][r][0] / s["local"][r][0] for r in rounds if s["local"][r][0]) if rounds else 0
    print("TABLE %-9s %3d %9.0f %9.0f %9.0f %11.2f %11.2f %9.1f %9.1f" % (rw, qd, med("local"), med("pnfsd"), med("nvmet"), rk, rl, med("pnfsd", 1), med("nvmet", 1)))
PY
awk '$5 == 0 {bad=1} END {exit bad}' "$OUT/fio.tsv"; check fio-ran $? "every job reported IOPS"

# The floor of any userspace target under this emulation: two threads of one process
# exchanging the same PDU sizes over the guest's loopback (the crate's `echo` example), no
# NVMe, no device. At QD 1 each exchange is two wake-ups of a user thread; a userspace
# target adds at least one to every command, where nvmet stays in the kernel.
if [[ -x /host/nvme-echo ]]; then
    /host/nvme-echo 1 "$ROUNDS" > "$OUT/echo.txt" 2>&1
    check echo-ran $? "$(head -c 200 "$OUT/echo.txt")"
    sed 's/^/FLOOR /' "$OUT/echo.txt"
fi

dmesg_check
nvme disconnect -n "$NQN_P" >/dev/null; check disconnect-pnfsd $?
nvme disconnect -n "$NQN_K" >/dev/null; check disconnect-nvmet $?
kill -TERM $TPID; wait $TPID; check target-exit $? "SIGTERM: clean stop"
rm -f "$C/ports/1/subsystems/$NQN_K"
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
