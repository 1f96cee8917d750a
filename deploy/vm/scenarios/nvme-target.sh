#!/bin/bash
# nvme-target.sh - the Linux NVMe/TCP host against pnfsd's embedded target
# (what the Linux host must accept); the host half is deploy/vm/test-nvme-target.sh.
#
# Env (run-guest.sh -e NAME=VALUE):
#   NQN        subsystem NQN of pnfsd's target (required)
#   NVME_PORT  (4420)
#   VOL_BYTES  size of pnfsd's volume in bytes (required: the namespace size)
#   VOL_UUID   the volume UUID as 32 hex digits (required: NGUID and block 0)
#   PATTERN_MB (2)  size of each pattern
#
# Steps: nvme discover (the subsystem must be listed), nvme connect; the
# namespace's size and NGUID must be the volume's; block 0 read with O_DIRECT
# must carry the superblock magic and the UUID at offset 32; then two random
# patterns are written at the END of the volume (data area, which a fresh
# volume does not use: never the superblock, log or metadata area):
#   out/pattern-direct.bin at VOL_BYTES - 2*PATTERN_MB MiB  with dd oflag=direct
#   out/pattern-buffered.bin at VOL_BYTES - PATTERN_MB MiB  with dd (page cache) + sync
# both are read back with O_DIRECT and compared, then nvme disconnect.
# out/offsets.txt tells the host where they are: "<file> <byte offset>".
SCENARIO=${SCENARIO:-nvme-target}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

NVME_PORT=${NVME_PORT:-4420}
PATTERN_MB=${PATTERN_MB:-2}
[[ -n ${NQN:-} && -n ${VOL_BYTES:-} && -n ${VOL_UUID:-} ]] || die "NQN, VOL_BYTES and VOL_UUID are required"
OUT=/host/out
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) nqn=$NQN nvme_port=$NVME_PORT vol_bytes=$VOL_BYTES uuid=$VOL_UUID"

step "nvme discover -t tcp -a $SERVER -s $NVME_PORT"
disc=$(nvme discover -t tcp -a "$SERVER" -s "$NVME_PORT" 2>&1); rc=$?
echo "$disc"
[[ $rc == 0 ]] && grep -q "subnqn: *$NQN\$" <<< "$disc"
check discover $? "rc=$rc, $NQN listed"
grep -q "traddr: *$SERVER\$" <<< "$disc"
check discover-traddr $? "the Discovery Log advertises $SERVER (nvme_advertise)"

step "nvme connect -t tcp -a $SERVER -s $NVME_PORT -n $NQN"
nvme connect -t tcp -a "$SERVER" -s "$NVME_PORT" -n "$NQN" || die "nvme connect"
for ((i = 0; i < 50; i++)); do has_nvme_ns && break; sleep 0.2; done
nvme list
ns=$(nvme_namespaces | head -n1)
[[ -n $ns ]] || die "no namespace after connect"
DEV=/dev/$ns
echo "DEVICE $DEV subsysnqn=$(cat "/sys/block/$ns/device/subsysnqn" 2>/dev/null)"

size=$(blockdev --getsize64 "$DEV")
[[ $size == "$VOL_BYTES" ]]; check ns-size $? "$size bytes (volume $VOL_BYTES)"
lbs=$(blockdev --getss "$DEV")
[[ $lbs == 4096 ]]; check ns-lba-size $? "$lbs"
nguid=$(tr -d ' :\n-' < "/sys/block/$ns/nguid" 2>/dev/null)
[[ $nguid == "$VOL_UUID" ]]; check ns-nguid $? "nguid=$nguid"
eui=$(tr -d ' :\n-' < "/sys/block/$ns/eui" 2>/dev/null)
[[ -n $eui && $eui != 0000000000000000 ]]; check ns-eui64 $? "eui=$eui"
# no namespace UUID, so the kernel names it by the NGUID: udev's link is then
# nvme-eui.<nguid>, the one the SCSI-layout client opens (docs/pnfs.md)
wwid=$(cat "/sys/block/$ns/wwid" 2>/dev/null)
[[ $wwid == "eui.$VOL_UUID" ]]; check ns-wwid $? "wwid=$wwid"

# Block 0 is pnfsd's superblock: "PNFSDSB\1" then the UUID at byte 32.
b0=$(dd if="$DEV" bs=4096 count=1 iflag=direct 2>/dev/null | od -An -tx1 -v | tr -d ' \n')
[[ ${b0:0:14} == 504e4653445342 ]]; check superblock-magic $? "${b0:0:16}"
[[ ${b0:64:32} == "$VOL_UUID" ]]; check superblock-uuid $? "${b0:64:32}"

MB=$((1 << 20))
off_direct=$((VOL_BYTES - 2 * PATTERN_MB * MB))
off_buf=$((VOL_BYTES - PATTERN_MB * MB))
head -c $((PATTERN_MB * MB)) /dev/urandom > "$OUT/pattern-direct.bin"
head -c $((PATTERN_MB * MB)) /dev/urandom > "$OUT/pattern-buffered.bin"
printf 'pattern-direct.bin %s\npattern-buffered.bin %s\n' "$off_direct" "$off_buf" > "$OUT/offsets.txt"

step "dd oflag=direct ${PATTERN_MB} MiB at byte $off_direct"
dd if="$OUT/pattern-direct.bin" of="$DEV" bs=1M seek=$((off_direct / MB)) oflag=direct status=none
check write-direct $? "dd oflag=direct"
step "dd buffered ${PATTERN_MB} MiB at byte $off_buf + sync"
dd if="$OUT/pattern-buffered.bin" of="$DEV" bs=64k seek=$((off_buf / 65536)) status=none
check write-buffered $? "dd (page cache)"
sync "$DEV"; rc1=$?; sync; check sync $rc1 "sync $DEV (block device fsync: NVMe Flush)"
blockdev --flushbufs "$DEV"

for f in direct buffered; do
    off=$off_direct; [[ $f == buffered ]] && off=$off_buf
    got=$(dd if="$DEV" bs=1M skip=$((off / MB)) count="$PATTERN_MB" iflag=direct status=none | sha256sum | cut -d' ' -f1)
    want=$(sha256sum < "$OUT/pattern-$f.bin" | cut -d' ' -f1)
    [[ $got == "$want" ]]; check readback-$f $? "O_DIRECT read-back sha256 ${got:0:16}"
done

# Everything up to the disconnect must be clean; the teardown's keep-alive abort after it is
# the host's own (lib.sh nvme_teardown_mark).
dmesg_check
dmesg_mark
nvme_teardown_mark
step "nvme disconnect -n $NQN"
out=$(nvme disconnect -n "$NQN" 2>&1); rc=$?
echo "$out"
[[ $rc == 0 ]] && grep -q "disconnected 1 controller" <<< "$out"
check disconnect $? "rc=$rc"
sleep 0.5
! has_nvme_ns; check detached $? "no namespace left"
dmesg | grep -iE 'nvme' | tail -n 20 | sed 's/^/DMESG-NVME /'
dmesg_check


if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
