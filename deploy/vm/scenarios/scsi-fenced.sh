#!/bin/bash
# scsi-fenced.sh - what the Linux SCSI-layout client does when its direct I/O
# is refused with a reservation conflict: the state a fenced client is in
# (the MDS preempted its key), and that of a client writing to a volume it
# never registered on (a block-layout client while the MDS holds
# EXCLUSIVE_ACCESS_REG_ONLY, docs/pnfs.md). A measurement with assertions on
# the data only: the kernel's choices are reported as MEASURE lines.
#
# Steps: nvme connect, mount (pnfsd offering "scsi"), write file A (O_DIRECT,
# fsync) through the layout; then this host drops its own registration
# (Reservation Register, Unregister, IEKEY - as a preempt by the MDS would),
# checks its I/O is now refused, writes file B (O_DIRECT + fsync) and file C
# (buffered + fsync), reads all back, and reports how the bytes travelled.
# Asserted: the target refused the direct writes (conflict lines in dmesg),
# the application saw no error (both dd exit 0), every byte reads back right.
# Env: as block-layout.sh (VERS, NFS_PORT, NVME_PORT, NQN, EXPORT, FILE_MB).
SCENARIO=${SCENARIO:-scsi-fenced-v${VERS:-4.1}}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh
VERS=${VERS:-4.1} NFS_PORT=${NFS_PORT:-2049} EXPORT=${EXPORT:-/} NVME_PORT=${NVME_PORT:-4420}
FILE_MB=${FILE_MB:-8}
MNT=/mnt OUT=/host/out
DIR=pnfsd-vm-fenced-$(date +%s)-$RANDOM
[[ -n ${NQN:-} ]] || die "NQN is not set"
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) vers=$VERS dir=$DIR"
nvme_attach "$NVME_PORT" "$NQN" || die "nvme connect"
nvme_links
ns=$(nvme_namespaces | head -n1)
dmesg_mark
mount -t nfs -o "vers=$VERS,port=$NFS_PORT" "$SERVER:$EXPORT" "$MNT" || die "nfs mount"
[[ $(layout_type "$MNT") == LAYOUT_SCSI ]]; check layout-type $? "pnfs=$(layout_type "$MNT")"
wait_grace "$MNT" || die "grace"
mkdir "$MNT/$DIR" || die "mkdir"

for f in a b c; do head -c "${FILE_MB}M" /dev/urandom > "/tmp/$f.bin"; done
sum() { sha256sum < "$1" | cut -d' ' -f1; }
wbytes() { opcount "$MNT" WRITE 3; }

b0=$(wbytes)
dd if=/tmp/a.bin of="$MNT/$DIR/a.bin" bs=1M oflag=direct conv=fsync status=none
check write-a-registered $? "a.bin"
b1=$(wbytes)
echo "MEASURE registered: NFS WRITE bytes +$((b1 - b0)) for ${FILE_MB} MiB"
dd if="/dev/$ns" of=/dev/null bs=4096 count=1 iflag=direct status=none
check registrant-io $? "direct read of /dev/$ns while registered"

step "drop this host's registration (as a preempt-and-abort by the MDS would)"
nvme resv-register "/dev/$ns" --rrega=1 --iekey --crkey=0 --nrkey=0
check unregister $? "nvme resv-register --rrega=1 --iekey"
dd if="/dev/$ns" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null
(($? != 0)); check io-refused-after-unregister $? "direct read of /dev/$ns"
dmesg_mark
# The kernel logs I/O errors through printk_ratelimited (10 lines per 5 s): the partition scan
# refused at connect and the read just above may have used this window up, and a fast run
# reaches the write below inside it, so its conflict lines would be suppressed. Wait it out.
sleep 6

counts "$MNT" before-fenced
t0=$(date +%s.%N)
dd if=/tmp/b.bin of="$MNT/$DIR/b.bin" bs=1M oflag=direct conv=fsync status=none
rc_b=$?
t1=$(date +%s.%N)
b2=$(wbytes)
echo "MEASURE fenced O_DIRECT write: dd exit $rc_b in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s, NFS WRITE bytes +$((b2 - b1)) for ${FILE_MB} MiB"
dd if=/tmp/c.bin of="$MNT/$DIR/c.bin" bs=64k conv=fsync status=none
rc_c=$?
b3=$(wbytes)
echo "MEASURE fenced buffered write: dd exit $rc_c, NFS WRITE bytes +$((b3 - b2)) for ${FILE_MB} MiB"
counts "$MNT" after-fenced
dmesg | tail -n +$((DMESG_FROM + 1)) | head -n 30 | sed 's/^/KLOG /'
nconf=$(dmesg | tail -n +$((DMESG_FROM + 1)) | grep -c 'reservation conflict error.*WRITE')
((nconf > 0)); check fenced-direct-writes-refused $? "$nconf reservation-conflict WRITE lines"
((rc_b == 0 && rc_c == 0)); check fenced-writes-succeed $? "dd exit $rc_b (O_DIRECT) and $rc_c (buffered)"

sync; echo 3 > /proc/sys/vm/drop_caches
for f in a b c; do
    got=$(dd if="$MNT/$DIR/$f.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
    [[ $got == "$(sum "/tmp/$f.bin")" ]]; check readback-$f $? "$got"
done
printf '%s  %s\n' "$(sum /tmp/a.bin)" "$DIR/a.bin" "$(sum /tmp/b.bin)" "$DIR/b.bin" \
    "$(sum /tmp/c.bin)" "$DIR/c.bin" > "$OUT/checksums.txt"
nvme resv-report "/dev/$ns" --eds 2>&1 | awk '$1 == "rtype" || $1 == "regctl"' | sed 's/^/RESV /'
counts "$MNT" end
cp /proc/self/mountstats "$OUT/mountstats.txt"
umount "$MNT"; check umount $? "$MNT"
nvme disconnect -n "$NQN" >/dev/null
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
