#!/bin/bash
# deleg-metadata.sh - the metadata workload with read
# delegations off and on, in one guest run: untar a tree of small files, stat every
# file (find), read every file twice; per step the wall time and the NFS round trips
# (mountstats: OPEN, OPEN_NOATTR, CLOSE, GETATTR, ACCESS, LOOKUP, DELEGRETURN, all ops), then rm -rf
# (the holder returns its delegations before it removes a file: DELEGRETURN > 0 with
# delegations on). Interleaved rounds: off, on, off, on, ... (ROUNDS of each); the
# summary gives each setting's medians and the on/off ratios.
#
# The host sets the server's delegations before each phase through a hook:
#   VM_HOST_HOOK='deploy/vm/restart-hook.sh "<command>"' deploy/vm/run-guest.sh ... deleg-metadata.sh
# where `<command> i` restarts pnfsd with no delegations (read and write off) for odd i
# and with read delegations on for even i, write delegations as the host's suite chose
# (test-pnfsd-suite.sh: `ctl delegs`, WRITE_DELEGATIONS). Handshake as restart.sh's: the guest
# creates out/restart-ready-<i>, the host answers restart-done-<i>. Each phase mounts
# afresh after the restart (no state to reclaim, mountstats from zero) once the NVMe
# controller is live again, and unmounts at its end.
#
# Env: VERS (4.1), NFS_PORT (2049), EXPORT (/), NQN, NVME_PORT (4420), LAYOUT (block),
#      ROUNDS (3), FILES (400), DIRS (20), RESTART_WAIT (180 s per restart).
# Output lines: META setting=off|on round=R step=S secs=T OPEN=n ... ALL=n
#               METASUM setting=off|on step=S secs=<median> OPEN=<median> ...
#               METARATIO step=S secs=on/off OPEN+GETATTR=on/off ...
SCENARIO=${SCENARIO:-deleg-metadata-v${VERS:-4.1}}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

VERS=${VERS:-4.1}
NFS_PORT=${NFS_PORT:-2049}
EXPORT=${EXPORT:-/}
NQN=${NQN:-}
NVME_PORT=${NVME_PORT:-4420}
LAYOUT=${LAYOUT:-block}
ROUNDS=${ROUNDS:-3}
FILES=${FILES:-400}
DIRS=${DIRS:-20}
RESTART_WAIT=${RESTART_WAIT:-180}
MNT=/mnt
OUT=/host/out
DIR=pnfsd-vm-meta-$(date +%s)-$RANDOM
# OPEN_NOATTR: the Linux client's OPEN by filehandle (CLAIM_FH) of a file it knows
OPS="OPEN OPEN_NOATTR CLOSE GETATTR ACCESS LOOKUP DELEGRETURN LAYOUTGET READ"
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) vers=$VERS nfs_port=$NFS_PORT layout=$LAYOUT rounds=$ROUNDS files=$FILES dirs=$DIRS dir=$DIR"

if [[ -n $NQN ]]; then
    nvme_attach "$NVME_PORT" "$NQN" || die "nvme connect"
    [[ $LAYOUT == scsi ]] && { nvme_links; dmesg_mark; }
fi
nvme_teardown_mark   # every phase restarts the server: the association is torn down

# The tree: FILES files of 1-16 KiB in DIRS directories, made once, in guest memory.
step "make the tree: $FILES files in $DIRS directories"
mkdir -p /tmp/tree
for ((f = 0; f < FILES; f++)); do
    d=/tmp/tree/d$((f % DIRS))
    [[ -d $d ]] || mkdir "$d"
    head -c $(( (f * 7919 % 16 + 1) * 1024 )) /dev/urandom > "$d/f$f"
done
tar -cf /tmp/tree.tar -C /tmp tree || die "tar -c"
sum_tree=$(cd /tmp && find tree -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -d' ' -f1)

now() { date +%s.%N; }
# snap: "OP=n ..." for OPS and ALL (every op of the mount)
snap() {
    local op line=""
    for op in $OPS; do line+="$op=$(opcount "$MNT" "$op") "; done
    echo "${line}ALL=$(opstats "$MNT" | awk '{ n += $2 } END { print n + 0 }')"
}
# delta BEFORE AFTER: AFTER - BEFORE, field by field
delta() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        n = split(a, x, " "); split(b, y, " ")
        for (i = 1; i <= n; i++) { split(x[i], p, "="); split(y[i], q, "="); printf "%s%s=%d", (i > 1 ? " " : ""), p[1], q[2] - p[2] }
    }'
}
# step_run SETTING ROUND NAME COMMAND...: runs it, prints its META line
step_run() {
    local setting=$1 round=$2 name=$3 b a t0 t1 rc
    shift 3
    b=$(snap); t0=$(now)
    "$@"; rc=$?
    t1=$(now); a=$(snap)
    ((rc == 0)); check "$setting-$round-$name" $? "$*"
    echo "META setting=$setting round=$round step=$name secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') $(delta "$b" "$a")" |
        tee -a "$OUT/meta.txt"
}
stat_all() { find "$1" -type f -print0 | xargs -0 stat --format='%s %Y' > /dev/null; }
read_all() { find "$1" -type f -print0 | xargs -0 cat > /dev/null; }
sum_of() { (cd "$1" && find tree -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -d' ' -f1); }
nvme_live() {
    local i s
    [[ -n $NQN ]] || return 0
    for ((i = 0; i < 120; i++)); do
        s=$(cat /sys/class/nvme/nvme*/state 2>/dev/null | sort -u | tr '\n' ' ')
        [[ $s == "live " ]] && return 0
        sleep 0.5
    done
    echo "NOTE nvme controller state: ${s:-none}"
    return 1
}

i=0
for ((r = 1; r <= ROUNDS; r++)); do
    for setting in off on; do
        i=$((i + 1))
        # ---- the host restarts pnfsd with this phase's read_delegations ----
        : > "$OUT/restart-ready-$i"
        step "phase $i ($setting, round $r): waiting for the host to restart the server"
        for ((w = 0; w < RESTART_WAIT * 2; w++)); do [[ -e /host/restart-done-$i ]] && break; sleep 0.5; done
        [[ -e /host/restart-done-$i ]] || die "the host hook did not answer restart $i in $RESTART_WAIT s"
        [[ $(cat "/host/restart-done-$i") == 0 ]]; check "restart-$i" $? "host command exit $(cat "/host/restart-done-$i")"
        nvme_live; check "nvme-live-$i" $? "controller reconnected after restart $i"
        mount -t nfs -o "vers=$VERS,port=$NFS_PORT" "$SERVER:$EXPORT" "$MNT" || die "mount (phase $i)"
        wait_grace "$MNT" || die "still in grace after 120 s (phase $i)"
        mkdir -p "$MNT/$DIR"
        d=$MNT/$DIR/$setting-$r
        mkdir "$d" || die "mkdir $d"
        # ---- the workload ----
        step_run "$setting" "$r" untar tar -xf /tmp/tree.tar -C "$d"
        step_run "$setting" "$r" stat stat_all "$d"
        step_run "$setting" "$r" read1 read_all "$d"
        step_run "$setting" "$r" read2 read_all "$d"
        got=$(sum_of "$d")
        [[ $got == "$sum_tree" ]]; check "$setting-$r-content" $? "$got"
        step_run "$setting" "$r" rm rm -rf "$d"
        lt=$(layout_type "$MNT")
        [[ -n $lt ]] && echo "LAYOUT pnfs=$lt"
        opstats "$MNT" > "$OUT/mountstats-$setting-$r.txt"
        umount "$MNT"; check "umount-$i" $? "$MNT"
    done
done

# A file for the host's byte check (client-suite.sh CAT_CMD), then the summary.
mount -t nfs -o "vers=$VERS,port=$NFS_PORT" "$SERVER:$EXPORT" "$MNT" || die "final mount"
cp /tmp/tree/d0/f0 "$MNT/$DIR/f0" && sync
printf '%s  %s\n' "$(sha256sum < /tmp/tree/d0/f0 | cut -d' ' -f1)" "$DIR/f0" > "$OUT/checksums.txt"
umount "$MNT"

# Medians over the rounds of each setting, per step and for the workload (untar + stat +
# read1 + read2), and the on/off ratios; the checks that delegations must pass.
python3 - "$OUT/meta.txt" > "$OUT/summary.txt" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) for l in open(sys.argv[1])]
keys = ["secs", "OPEN", "OPEN_NOATTR", "CLOSE", "GETATTR", "ACCESS", "LOOKUP", "DELEGRETURN", "LAYOUTGET", "READ", "ALL"]
work = ["untar", "stat", "read1", "read2"]
def per_round(setting, steps):
    out = {}
    for r in rows:
        if r["setting"] == setting and r["step"] in steps:
            t = out.setdefault(r["round"], dict.fromkeys(keys, 0.0))
            for k in keys:
                t[k] += float(r.get(k, 0))
    return list(out.values())
med = {}
for setting in ("off", "on"):
    for name, steps in [(s, [s]) for s in work + ["rm"]] + [("workload", work)]:
        rs = per_round(setting, steps)
        if not rs:
            continue
        m = {k: statistics.median([r[k] for r in rs]) for k in keys}
        med[setting, name] = m
        print("METASUM setting=%s step=%s rounds=%d %s" % (setting, name, len(rs), " ".join(
            "%s=%s" % (k, ("%.2f" % m[k]) if k == "secs" else "%g" % m[k]) for k in keys)))
def ratio(a, b):
    return "%.3f" % (a / b) if b else "n/a"
for name in work + ["rm", "workload"]:
    off, on = med.get(("off", name)), med.get(("on", name))
    if off and on:
        og = lambda m: m["OPEN"] + m["OPEN_NOATTR"] + m["GETATTR"]
        print("METARATIO step=%s secs=%s OPEN+GETATTR=%s (%g/%g) ALL=%s (%g/%g)" % (
            name, ratio(on["secs"], off["secs"]), ratio(og(on), og(off)), og(on), og(off),
            ratio(on["ALL"], off["ALL"]), on["ALL"], off["ALL"]))
off, on = med.get(("off", "workload")), med.get(("on", "workload"))
if off and on:
    og = lambda m: m["OPEN"] + m["OPEN_NOATTR"] + m["GETATTR"]
    print("CHECK fewer-open-getattr %s on %g off %g (OPEN+OPEN_NOATTR+GETATTR, workload medians)" % (
        "ok" if og(on) < og(off) else "FAIL", og(on), og(off)))
    print("NOTE wall time on/off %s (workload medians %.2f / %.2f s)" % (
        ratio(on["secs"], off["secs"]), on["secs"], off["secs"]))
ret = {s: sum(float(r.get("DELEGRETURN", 0)) for r in rows if r["setting"] == s) for s in ("off", "on")}
print("CHECK delegreturn-with-delegations %s DELEGRETURN on=%g off=%g" % (
    "ok" if ret["on"] > 0 and ret["off"] == 0 else "FAIL", ret["on"], ret["off"]))
PY
cat "$OUT/summary.txt"
grep -q '^CHECK .* FAIL' "$OUT/summary.txt" && FAILED=1
dmesg_check 'not responding|server [^ ]+ OK|nvme[0-9]+: starting error recovery'
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
