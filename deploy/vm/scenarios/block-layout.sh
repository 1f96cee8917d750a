#!/bin/bash
# block-layout.sh - the Linux pNFS client against pnfsd on the host, data
# through pnfsd's embedded NVMe/TCP target.
#
# Env (run-guest.sh -e NAME=VALUE):
#   VERS=4.1|4.2 (4.1)   NFS_PORT (2049)   EXPORT (/)
#   NQN  subsystem NQN of pnfsd's target (required when EXPECT_PNFS=1)
#   NVME_PORT (4420)
#   LAYOUT=block|scsi (block): scsi also makes the /dev/disk/by-id/nvme-eui.*
#        links (no udev in the guest) and expects pnfs=LAYOUT_SCSI
#   EXPECT_PNFS=1|0 (1): 0 runs the same I/O against any NFSv4 server (e.g. a
#        non-pNFS one, to test the rig) and reports the layout checks as NOTE
#   FILE_MB (8)  size of the buffered and O_DIRECT test files
#   FIO_SIZE (16m) FIO_BS (64k)  the overwrite job
#   KEEP_FILES=1|0 (1): leave $EXPORT/pnfsd-vm-*/ for the host's checksum comparison
#
# Steps: nvme discover + connect, mount, write one file buffered and one with
# O_DIRECT (dd, 1 MiB), fsync, drop caches, read both back (buffered and
# O_DIRECT) and compare SHA-256, rename, remove, fio overwrite job with
# fsync=1, a file stored through a shared mapping (half of it after close(2))
# and msync'd, read back O_DIRECT, then the assertions:
#   - LAYOUTGET, GETDEVICEINFO, LAYOUTCOMMIT counts > 0 (COUNTS lines);
#   - NFS WRITE/READ byte counts far below the data moved (< 1/8): the bulk
#     went to the block device, not through the MDS;
#   - no pNFS fallback / I/O error lines in dmesg.
# Results on the host (run directory out/): checksums.txt (sha256 and path
# relative to the export, for comparing with the bytes pnfsd serves),
# mountstats.txt, fio.txt. Exit 0 only if every check passed.
SCENARIO=${SCENARIO:-${LAYOUT:-block}-layout-v${VERS:-4.1}}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

VERS=${VERS:-4.1}
NFS_PORT=${NFS_PORT:-2049}
EXPORT=${EXPORT:-/}
NQN=${NQN:-}
NVME_PORT=${NVME_PORT:-4420}
LAYOUT=${LAYOUT:-block}
EXPECT_PNFS=${EXPECT_PNFS:-1}
FILE_MB=${FILE_MB:-8}
FIO_SIZE=${FIO_SIZE:-16m}
FIO_BS=${FIO_BS:-64k}
MNT=/mnt
OUT=/host/out
# a per-run directory on the export: runs never collide, the host finds the files
DIR=pnfsd-vm-$(date +%s)-$RANDOM
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) vers=$VERS nfs_port=$NFS_PORT export=$EXPORT layout=$LAYOUT nqn=${NQN:-none} nvme_port=$NVME_PORT dir=$DIR"

# ---- data path --------------------------------------------------------------
if [[ -n $NQN ]]; then
    nvme_attach "$NVME_PORT" "$NQN" || die "nvme connect to $SERVER:$NVME_PORT $NQN"
    if [[ $LAYOUT == scsi ]]; then
        nvme_links
        # The SCSI-layout client registers a reservation key on the volume at
        # GETDEVICEINFO; without reservation support it falls back to the MDS
        # without a kernel message. ONCS bit 5 = Reservations (NVMe base spec).
        ns=$(nvme_namespaces | head -n1)
        oncs=$(nvme id-ctrl "/dev/${ns%n*}" 2>/dev/null | awk '$1 == "oncs" {print $3}')
        rescap=$(nvme id-ns "/dev/$ns" 2>/dev/null | awk '$1 == "rescap" {print $3}')
        (( (${oncs:-0} >> 5) & 1 )); check nvme-reservations $? "oncs=${oncs:-?} rescap=${rescap:-?}"
        # The MDS holds EXCLUSIVE_ACCESS_REG_ONLY (RFC 8154 §2.4.2): until the client
        # registers the key GETDEVICEINFO gives it, this host's I/O is refused. The kernel
        # logs that (the partition scan at connect, and this read): expected, so
        # dmesg_check only looks at what comes after.
        dd if="/dev/$ns" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null
        (($? != 0)); check unregistered-io-refused $? "direct read of /dev/$ns before the client registered"
        echo "NOTE $(dmesg | grep -c 'reservation conflict') reservation-conflict lines before the mount (unregistered host: expected)"
        dmesg_mark
    fi
elif [[ $EXPECT_PNFS == 1 ]]; then
    die "NQN is not set (the layout's volume is only reachable over NVMe/TCP)"
else
    echo "NOTE no NQN: no NVMe/TCP data path"
fi

# ---- mount ---------------------------------------------------------------------
opts="vers=$VERS,port=$NFS_PORT${MOUNT_OPTS:+,$MOUNT_OPTS}"
step "mount -t nfs -o $opts $SERVER:$EXPORT $MNT"
mount -t nfs -o "$opts" "$SERVER:$EXPORT" "$MNT" || die "nfs mount"
grep " $MNT " /proc/mounts
lt=$(layout_type "$MNT")
want=LAYOUT_BLOCK_VOLUME; [[ $LAYOUT == scsi ]] && want=LAYOUT_SCSI
echo "LAYOUT pnfs=$lt"
step "wait for the end of the server's grace period"
wait_grace "$MNT" || die "still in grace (or no write access) after 120 s"
mkdir "$MNT/$DIR" || die "mkdir on the export"
counts "$MNT" start

# ---- buffered and O_DIRECT files ---------------------------------------------
head -c "${FILE_MB}M" /dev/urandom > /tmp/a.bin
head -c "${FILE_MB}M" /dev/urandom > /tmp/b.bin
sum_a=$(sha256sum < /tmp/a.bin | cut -d' ' -f1)
sum_b=$(sha256sum < /tmp/b.bin | cut -d' ' -f1)
step "buffered write ${FILE_MB} MiB + fsync"
dd if=/tmp/a.bin of="$MNT/$DIR/buffered.bin" bs=64k conv=fsync status=none
check write-buffered $? "$DIR/buffered.bin"
step "O_DIRECT write ${FILE_MB} MiB (1 MiB blocks) + fsync"
dd if=/tmp/b.bin of="$MNT/$DIR/direct.bin" bs=1M oflag=direct conv=fsync status=none
check write-direct $? "$DIR/direct.bin"
counts "$MNT" after-write

sync; echo 3 > /proc/sys/vm/drop_caches
step "read back (buffered and O_DIRECT)"
got=$(sha256sum < "$MNT/$DIR/buffered.bin" | cut -d' ' -f1)
[[ $got == "$sum_a" ]]; check readback-buffered $? "$got"
got=$(dd if="$MNT/$DIR/direct.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
[[ $got == "$sum_b" ]]; check readback-direct $? "$got"
got=$(dd if="$MNT/$DIR/buffered.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
[[ $got == "$sum_a" ]]; check readback-direct-of-buffered $? "$got"
counts "$MNT" after-read

step "rename + remove"
mv "$MNT/$DIR/buffered.bin" "$MNT/$DIR/renamed.bin"
[[ -e $MNT/$DIR/renamed.bin && ! -e $MNT/$DIR/buffered.bin ]]; check rename $? "buffered.bin -> renamed.bin"
sync; echo 3 > /proc/sys/vm/drop_caches
got=$(sha256sum < "$MNT/$DIR/renamed.bin" | cut -d' ' -f1)
[[ $got == "$sum_a" ]]; check readback-renamed $? "$got"
rm "$MNT/$DIR/direct.bin"
[[ ! -e $MNT/$DIR/direct.bin ]]; check remove $? "direct.bin"

# ---- fio overwrite job ---------------------------------------------------------
# --overwrite=1: fio first lays the file out, then the timed job rewrites it,
# 64 KiB at a time, each write followed by fsync (-> LAYOUTCOMMIT).
# --fallocate=none: with 4.2 an fallocate becomes ALLOCATE and changes the
# LAYOUTGET pattern; none keeps 4.1 and 4.2 comparable.
step "fio overwrite: size=$FIO_SIZE bs=$FIO_BS fsync=1"
counts "$MNT" before-fio
fio --name=overwrite --filename="$MNT/$DIR/fio.bin" --size="$FIO_SIZE" --bs="$FIO_BS" \
    --rw=write --overwrite=1 --ioengine=sync --fsync=1 --fallocate=none \
    --output-format=normal > "$OUT/fio.txt" 2>&1
check fio $? "see fio.txt"
counts "$MNT" after-fio
grep -E '^ +(write:|WRITE:)|^ +sync \((u|m)sec\)|^ +fsync/fdatasync' "$OUT/fio.txt" | sed 's/^ */FIO /'
sync; echo 3 > /proc/sys/vm/drop_caches
sum_f=$(dd if="$MNT/$DIR/fio.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
buf_f=$(sha256sum < "$MNT/$DIR/fio.bin" | cut -d' ' -f1)
[[ $sum_f == "$buf_f" ]]; check fio-readback-consistent $? "$sum_f"
# ---- mmap: stores through a shared mapping that outlives close(2), then msync ----
# The page cache's writeback of dirty mapped pages goes through the layout like any
# other; msync(MS_SYNC) is the application's fsync for them (the mapping holds the open
# file, so it commits after close: LAYOUTCOMMIT). Half the file is stored before close,
# half after.
step "mmap write ${FILE_MB} MiB (MAP_SHARED, half after close) + msync"
head -c "${FILE_MB}M" /dev/urandom > /tmp/m.bin
sum_m=$(sha256sum < /tmp/m.bin | cut -d' ' -f1)
python3 - "$MNT/$DIR/mmap.bin" /tmp/m.bin <<'PY'
import mmap, os, sys
data = open(sys.argv[2], "rb").read()
half = len(data) // 2
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
os.ftruncate(fd, len(data))
m = mmap.mmap(fd, len(data), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[:half] = data[:half]
os.close(fd)
m[half:] = data[half:]
m.flush()  # msync(MS_SYNC)
m.close()
PY
check write-mmap $? "$DIR/mmap.bin"
sync; echo 3 > /proc/sys/vm/drop_caches
got=$(dd if="$MNT/$DIR/mmap.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
[[ $got == "$sum_m" ]]; check readback-mmap $? "$got"

printf '%s  %s\n' "$sum_a" "$DIR/renamed.bin" "$sum_f" "$DIR/fio.bin" "$sum_m" "$DIR/mmap.bin" > "$OUT/checksums.txt"
echo "CHECKSUMS $(tr '\n' ' ' < "$OUT/checksums.txt")"

# ---- assertions ------------------------------------------------------------------
counts "$MNT" end
cp /proc/self/mountstats "$OUT/mountstats.txt"
lg=$(opcount "$MNT" LAYOUTGET) lc=$(opcount "$MNT" LAYOUTCOMMIT) gdi=$(opcount "$MNT" GETDEVICEINFO)
wb=$(opcount "$MNT" WRITE 3) rb=$(opcount "$MNT" READ 4)
fio_bytes=$(( $(numfmt --from=iec "${FIO_SIZE^^}") * 2 ))         # layout + overwrite
moved=$(( FILE_MB * 3 * 1048576 + fio_bytes ))                    # + the mmap file
pnfs_checks() {
    [[ $lt == "$want" ]]; check layout-type $? "pnfs=$lt (want $want)"
    ((lg > 0)); check layoutget $? "LAYOUTGET=$lg"
    ((gdi > 0)); check getdeviceinfo $? "GETDEVICEINFO=$gdi"
    ((lc > 0)); check layoutcommit $? "LAYOUTCOMMIT=$lc"
    ((wb * 8 < moved)); check no-bulk-nfs-write $? "NFS WRITE bytes $wb vs $moved written"
    ((rb * 8 < moved)); check no-bulk-nfs-read $? "NFS READ bytes $rb vs ~$moved read"
}
if [[ $EXPECT_PNFS == 1 ]]; then
    pnfs_checks
else
    pnfs_checks | sed 's/^CHECK \([^ ]*\) \(ok\|FAIL\)/NOTE \1 \2/'
fi
if [[ $LAYOUT == scsi && -n $NQN ]]; then
    # The client registered its key on the namespace: this host's I/O now passes the
    # reservation, and the report shows the MDS's reservation and both registrants.
    dd if="/dev/$ns" of=/dev/null bs=4096 count=1 iflag=direct status=none
    check registrant-io $? "direct read of /dev/$ns after the client registered"
    # --eds: the host uses a 128-bit Host Identifier (fabrics), so the non-extended
    # report is refused with Host Identifier Inconsistent Format (NVMe Base 2.0 §7.6)
    nvme resv-report "/dev/$ns" --eds > "$OUT/resv-report.txt" 2>&1
    sed 's/^/RESV /' "$OUT/resv-report.txt" | head -n 20
    rt=$(awk '$1 == "rtype" {print $3; exit}' "$OUT/resv-report.txt")
    nreg=$(awk '$1 == "regctl" {print $3; exit}' "$OUT/resv-report.txt")
    # this host's entry (rkey precedes hostid); earlier guests of the same pnfsd may still
    # be listed: Linux "unregisters" by Register Replace with NRKEY 0 (docs/pnfs.md)
    hid=$(tr -d '-' < "/sys/class/nvme/${ns%n*}/hostid")
    key=$(grep -B1 -E "hostid +: $hid" "$OUT/resv-report.txt" | awk '$1 == "rkey" {print $3}')
    [[ $rt == 4 && ${nreg:-0} -ge 2 && -n $key && $key != 0 ]]
    check reservation-report $? "rtype=${rt:-?} (4 = EXCLUSIVE_ACCESS_REG_ONLY) regctl=${nreg:-?} this host $hid key ${key:-none}"
fi
dmesg_check
echo "--- blkmapd log ---"; cat /run/blkmapd.log 2>/dev/null
echo "--- dm tables ---"; dmsetup table 2>&1

step "cleanup"
# the files stay by default, so the host can compare checksums.txt with the
# bytes pnfsd serves; KEEP_FILES=0 removes them
[[ ${KEEP_FILES:-1} == 1 ]] || rm -rf "${MNT:?}/$DIR"
umount "$MNT"; check umount $? "$MNT"
if [[ $LAYOUT == scsi && -n $NQN ]]; then
    # The client unregisters its key when it frees the device (not asserted: when that
    # happens after umount is the kernel's business).
    sleep 1
    if dd if="/dev/$ns" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null; then
        echo "NOTE after umount this host is still registered"
    else
        echo "NOTE after umount this host's I/O is refused again (key unregistered)"
    fi
fi
[[ -n $NQN ]] && nvme disconnect -n "$NQN" >/dev/null
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
