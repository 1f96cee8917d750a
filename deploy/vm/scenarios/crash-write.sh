#!/bin/bash
# crash-write.sh - the MDS dies in the middle of the client's writes.
#
# fio writes a file through the layout (64 KiB writes, fsync after each,
# --verify=crc32c) while the host stops pnfsd (SIGKILL or SIGTERM) and starts
# it again on the same data directory, once or several times in a row. The
# client must recover on its own (new client ID, reclaims, a new layout) and
# fio must finish with its data verified; the layout must still be in use
# after the restart (no fallback to NFS WRITE), and the number of LAYOUTCOMMITs
# after the restart must stay within a few times the fsyncs (no retry storm).
#
# Host half: restart-hook.sh with a command that stops and restarts the server
# when the guest asks (out/restart-ready-<i>) and returns once the server has
# answered its first LAYOUTCOMMIT with OK (test-pnfsd-suite.sh: `ctl crash`),
# printing `FIRST_COMMIT restart=<i> signal=<SIG> seconds=<s>` into the run
# directory's restart-hook.log, which this scenario reports.
#
# Env: VERS (4.1), NFS_PORT (2049), EXPORT (/), NQN, NVME_PORT (4420),
#      LAYOUT (block|scsi), EXPECT_PNFS (1), RESTARTS (1), CRASH_SIGNALS
#      (informative: what the host sends), FIO_SIZE (64m), FIO_BS (64k),
#      (each restart is asked for once fio has written a quarter of what is left, at most
#      6 MiB, since the previous recovery),
#      METRICS_PORT (pnfsd's metrics endpoint on the host, for its own
#      LAYOUTCOMMIT counters since the last restart; unset: skipped),
#      STORM_FACTOR (4: LAYOUTCOMMITs after the first restart may be at most
#      this many times the fsyncs after it, plus 8), FIO_DEADLINE (420 s),
#      DENIED_NAMESPACE (1: the client also sees a namespace it may not use - the metadata
#      member of a split volume on `pnfsd target` - whose partition scan meets Access Denied;
#      those kernel messages are expected),
#      MDS_WRITE_LIMIT (bytes: the NFS WRITE bytes after restart 1 must stay under it; unset:
#      under an eighth of what fio wrote after it),
#      SCSI_EXPECT_LAYOUT_AFTER_CRASH (1: LAYOUT=scsi is held to the block layout's rules —
#      the registrations survive the restart (PTPL), so the replayed write lands and the
#      layout stays in use; 0 turns the SCSI checks after a restart into NOTE lines, for a
#      server whose target does not keep its reservations).
SCENARIO=${SCENARIO:-crash-${LAYOUT:-block}-v${VERS:-4.1}}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

VERS=${VERS:-4.1}
NFS_PORT=${NFS_PORT:-2049}
EXPORT=${EXPORT:-/}
NQN=${NQN:-}
NVME_PORT=${NVME_PORT:-4420}
LAYOUT=${LAYOUT:-block}
EXPECT_PNFS=${EXPECT_PNFS:-1}
# lenient: a SCSI run that may fall back to the MDS after a restart (NOTE lines)
lenient=0; [[ $LAYOUT == scsi && ${SCSI_EXPECT_LAYOUT_AFTER_CRASH:-1} != 1 ]] && lenient=1
RESTARTS=${RESTARTS:-1}
FIO_SIZE=${FIO_SIZE:-64m}
FIO_BS=${FIO_BS:-64k}
STORM_FACTOR=${STORM_FACTOR:-4}
FIO_DEADLINE=${FIO_DEADLINE:-420}
MNT=/mnt
OUT=/host/out
DIR=pnfsd-vm-crash-$(date +%s)-$RANDOM
F=$MNT/$DIR/crash.bin
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) vers=$VERS layout=$LAYOUT restarts=$RESTARTS signals=${CRASH_SIGNALS:-?} fio_size=$FIO_SIZE fio_bs=$FIO_BS dir=$DIR"

if [[ -n $NQN ]]; then
    nvme_attach "$NVME_PORT" "$NQN" || die "nvme connect"
    # scsi: the partition scan before the client registers is refused (docs/pnfs.md)
    [[ $LAYOUT == scsi ]] && nvme_links
    dmesg_mark
elif [[ $EXPECT_PNFS == 1 ]]; then
    die "NQN is not set"
fi
step "mount -t nfs -o vers=$VERS,port=$NFS_PORT $SERVER:$EXPORT $MNT"
mount -t nfs -o "vers=$VERS,port=$NFS_PORT${MOUNT_OPTS:+,$MOUNT_OPTS}" "$SERVER:$EXPORT" "$MNT" || die "nfs mount"
wait_grace "$MNT" || die "grace"
mkdir "$MNT/$DIR" || die "mkdir"
if [[ $EXPECT_PNFS == 1 ]]; then
    want=LAYOUT_BLOCK_VOLUME; [[ $LAYOUT == scsi ]] && want=LAYOUT_SCSI
    [[ $(layout_type "$MNT") == "$want" ]]; check layout-type $? "pnfs=$(layout_type "$MNT")"
fi

# metric NAME: pnfsd's counter NAME (pnfsd_..._total) from the host's endpoint
metric() {
    [[ -n ${METRICS_PORT:-} ]] || { echo "?"; return; }
    python3 - "$SERVER" "$METRICS_PORT" "$1" <<'PY' 2>/dev/null || echo "?"
import sys, urllib.request
host, port, name = sys.argv[1], sys.argv[2], sys.argv[3]
for line in urllib.request.urlopen("http://%s:%s/metrics" % (host, port), timeout=10).read().decode().splitlines():
    if line.split(" ")[0] == name:
        print(int(float(line.split(" ")[1]))); break
else:
    print("?")
PY
}
# (a stat of a file with writes in flight waits for them: bounded, so a client stuck in
# recovery cannot hang the scenario; "?" then)
fsize() { timeout -s KILL 10 stat -c %s "$F" 2>/dev/null || echo "?"; }
# written: the bytes fio's processes have written so far (/proc/PID/io wchar: no NFS call,
# so it answers at once even while the client recovers; fio.txt is written only at the end)
written() {
    local p n=0 w
    for p in $fio_pid $(pgrep -P "$fio_pid" 2>/dev/null); do
        w=$(awk '$1 == "wchar:" { print $2 }' "/proc/$p/io" 2>/dev/null) && n=$((n + ${w:-0}))
    done
    echo "$n"
}
snap() { local c; c=$(counts "$MNT" "$1"); echo "$c"; echo "$c" >> /tmp/counts; }

bs=$(numfmt --from=iec "${FIO_BS^^}")
total=$(numfmt --from=iec "${FIO_SIZE^^}")
snap before-fio
# Buffered, as an application writes: each 64 KiB write is followed by fsync, which the
# client turns into block I/O on the volume plus a LAYOUTCOMMIT. fio then reads the
# file back and checks every block's crc32c.
step "fio write size=$FIO_SIZE bs=$FIO_BS fsync=1 verify=crc32c (server restarts: $RESTARTS)"
fio --name=crash --filename="$F" --rw=write --size="$FIO_SIZE" --bs="$FIO_BS" \
    --ioengine=psync --fsync=1 --fallocate=none --verify=crc32c --do_verify=1 \
    --verify_fatal=1 --output-format=normal > "$OUT/fio.txt" 2>&1 &
fio_pid=$!
t_fio=$(date +%s)

at_restart=()          # the file's size when the guest asked for restart i
for ((i = 1; i <= RESTARTS; i++)); do
    # a quarter of what is left (at most 8 MiB) after the last recovery, so each restart
    # lands while fio still writes (a stat here can take seconds, and fio goes on meanwhile)
    now=$(written)
    step=$(( (total - now) / 4 )); (( step < 6 << 20 )) || step=$((6 << 20))
    want=$((now + step))
    while :; do
        sz=$(written)
        (( sz < want )) || break
        kill -0 $fio_pid 2>/dev/null || break
        (( $(date +%s) - t_fio < FIO_DEADLINE )) || break
        sleep 0.1
    done
    if ! kill -0 $fio_pid 2>/dev/null; then
        if ((lenient)); then   # through the MDS since a restart
            echo "NOTE restart-$i: fio ended before it (SCSI_EXPECT_LAYOUT_AFTER_CRASH=0)"
        else
            check restart-$i 1 "fio ended before restart $i (at $(written) bytes)"
        fi
        break
    fi
    at_restart[i]=$sz
    snap before-restart-$i
    step "asking the host for restart $i at $sz bytes"
    nvme_teardown_mark   # the restart drops the NVMe/TCP connection (lib.sh)
    touch "$OUT/restart-ready-$i"
    # the host answers once the server has accepted a LAYOUTCOMMIT again (or gave up)
    while [[ ! -e /host/restart-done-$i ]]; do
        (( $(date +%s) - t_fio < FIO_DEADLINE )) || break
        sleep 0.5
    done
    st=$(cat /host/restart-done-$i 2>/dev/null || echo none)
    if [[ $st != 0 ]] && ((lenient)); then
        # A target that loses its registrations: the in-flight write after the restart
        # meets Reservation Conflict and the client writes through the MDS for its
        # layout-failure timeout (120 s): no LAYOUTCOMMIT for the host to wait for.
        echo "NOTE restart-$i host status $st: no LAYOUTCOMMIT after the restart (SCSI_EXPECT_LAYOUT_AFTER_CRASH=0)"
    else
        [[ $st == 0 ]]; check restart-$i $? "host restart command status $st; fio had written $(written) bytes"
    fi
    grep -h "^FIRST_COMMIT restart=$i " /host/restart-hook.log 2>/dev/null | tail -n1
done

# fio: bounded wait (a client stuck in a LAYOUTCOMMIT loop never finishes)
while kill -0 $fio_pid 2>/dev/null && (( $(date +%s) - t_fio < FIO_DEADLINE )); do sleep 1; done
if kill -0 $fio_pid 2>/dev/null; then
    snap stuck
    echo "METRIC layoutcommits_since_restart=$(metric pnfsd_layoutcommits_total) errors=$(metric pnfsd_layoutcommit_errors_total)"
    check fio 1 "no end after ${FIO_DEADLINE} s (file at $(fsize) bytes)"
    cp /proc/self/mountstats "$OUT/mountstats.txt"
    dmesg | grep -iE 'nfs|pnfs|layout' | tail -20 | sed 's/^/KLOG /'
    echo "RESULT FAIL $SCENARIO fio stuck"
    exit 1   # the mount cannot be taken down while fio hangs in it: the guest powers off
fi
wait $fio_pid
fio_rc=$?
grep -E 'verify|crc32c|bad magic|error' "$OUT/fio.txt" | head -5 | sed 's/^/FIO /'
((fio_rc == 0)) && ! grep -q 'verify: bad' "$OUT/fio.txt"
check fio-verified $? "fio exit $fio_rc after $(( $(date +%s) - t_fio )) s (see fio.txt)"
snap end
cp /proc/self/mountstats "$OUT/mountstats.txt"

# After the caches are dropped, read the file back with O_DIRECT: through a READ layout,
# i.e. from the server's extent map — blocks whose LAYOUTCOMMIT was lost read as zeros.
sync; echo 3 > /proc/sys/vm/drop_caches
fio --name=crash --filename="$F" --rw=write --size="$FIO_SIZE" --bs="$FIO_BS" \
    --ioengine=psync --direct=1 --verify=crc32c --verify_only=1 --verify_fatal=1 \
    --output-format=normal > "$OUT/fio-reverify.txt" 2>&1
check reverify-after-drop-caches $? "O_DIRECT re-read of the whole file (fio-reverify.txt)"
sum=$(dd if="$F" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
printf '%s  %s\n' "$sum" "$DIR/crash.bin" > "$OUT/checksums.txt"
echo "CHECKSUM $sum $DIR/crash.bin"

if [[ $EXPECT_PNFS == 1 && -n ${at_restart[1]:-} ]]; then
    # what happened after the first restart (mountstats deltas)
    get() { # get LABEL OP: the op count on the COUNTS line LABEL printed above
        awk -v l="$1" -v o="$2" '$2 == l { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == o) print kv[2] } }' /tmp/counts
    }
    lc=$(( $(get end LAYOUTCOMMIT) - $(get before-restart-1 LAYOUTCOMMIT) ))
    lg=$(( $(get end LAYOUTGET) - $(get before-restart-1 LAYOUTGET) ))
    wb=$(( $(get end WRITE_BYTES) - $(get before-restart-1 WRITE_BYTES) ))
    fsyncs=$(( (total - at_restart[1]) / bs ))
    echo "AFTER_RESTART LAYOUTCOMMIT=$lc LAYOUTGET=$lg WRITE_BYTES=$wb fsyncs=$fsyncs"
    (( lg > 0 && lc > 0 )); check layout-after-restart $? "LAYOUTGET=$lg LAYOUTCOMMIT=$lc after restart 1"
    if ((lenient)); then
        echo "NOTE no-mds-fallback (SCSI_EXPECT_LAYOUT_AFTER_CRASH=0): NFS WRITE bytes after restart 1: $wb of $((total - at_restart[1]))"
    else
        limit=${MDS_WRITE_LIMIT:-$(( (total - at_restart[1]) / 8 ))}
        (( wb < limit )); check no-mds-fallback $? "NFS WRITE bytes after restart 1: $wb, limit $limit (data after it: $((total - at_restart[1])))"
    fi
    (( lc <= STORM_FACTOR * fsyncs + 8 )); check no-layoutcommit-storm $? "LAYOUTCOMMIT=$lc for $fsyncs fsyncs after restart 1"
    slc=$(metric pnfsd_layoutcommits_total) sle=$(metric pnfsd_layoutcommit_errors_total)
    echo "METRIC server_layoutcommits_since_last_restart=$slc errors=$sle"
fi

if [[ $LAYOUT == scsi && -n $NQN ]]; then
    # after the restarts: the reservation the MDS kept (rtype 4), its PTPL state, and this
    # host's key (the one of the last instance: GETDEVICEINFO of the new device id)
    ns=$(nvme_namespaces | head -n1)
    hid=$(tr -d '-' < "/sys/class/nvme/${ns%n*}/hostid")
    nvme resv-report "/dev/$ns" --eds > "$OUT/resv-report.txt" 2>&1
    awk '$1 == "rtype" || $1 == "regctl" || $1 == "ptpls"' "$OUT/resv-report.txt" | sed 's/^/RESV /'
    echo "RESV this host $hid key $(grep -B1 -E "hostid +: $hid" "$OUT/resv-report.txt" | awk '$1 == "rkey" {print $3}')"
fi
dmesg | grep -iE 'nfs|reclaim|grace|pnfs|layout' | tail -20 | sed 's/^/KLOG /'
dmesg | grep -E 'nvme[0-9]+: ' | sed 's/^/NVME /'
# each restart drops the NVMe/TCP connection (the target is in pnfsd): error recovery
# and reconnect are expected, an I/O error is not
# (SCSI: the registrations survive the restart, so a Reservation Conflict is an error too,
# unless SCSI_EXPECT_LAYOUT_AFTER_CRASH=0: then the replayed write may meet one and the
# data is rewritten through the MDS)
ign='not responding|server [^ ]+ OK|nvme[0-9]+: starting error recovery'
((lenient)) && ign+='|I/O Error \(sct 0x0 / sc 0x83\)|reservation conflict error|nvme_log_error: [0-9]+ callbacks suppressed'
[[ ${DENIED_NAMESPACE:-0} == 1 ]] &&
    ign+='|I/O Error \(sct 0x2 / sc 0x86\)|Buffer I/O error on dev nvme[0-9]+n[0-9]+, logical block 0, async page read|nvme_log_error: [0-9]+ callbacks suppressed'
dmesg_check "$ign"
umount "$MNT"; check umount $? "$MNT"
[[ -n $NQN ]] && nvme disconnect -n "$NQN" >/dev/null
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
