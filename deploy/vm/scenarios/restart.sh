#!/bin/bash
# restart.sh - the server restarts while the guest holds a file open; the
# client must recover (reclaim during grace) and the data written before each
# fsync must be intact afterwards.
#
# Needs a host-side hook that restarts the server: run it with
#   VM_HOST_HOOK='deploy/vm/restart-hook.sh "<restart command>"' deploy/vm/run-guest.sh ... restart.sh
# Handshake through the 9p share, for i = 1..RESTARTS:
#   guest: writes phase i, fsync, creates out/restart-ready-<i>, waits
#   host:  sees it, runs "<restart command> <i>" (e.g. 1 = SIGTERM, 2 = SIGKILL),
#          creates restart-done-<i> in the run directory
#   guest: verifies phases 1..i through a second O_DIRECT descriptor, then
#          writes phase i+1 on the SAME open descriptor (this is where the
#          client has to reclaim its open state) and fsyncs.
# At the end: close, drop caches, O_DIRECT read of the whole file, SHA-256.
#
# Env: VERS (4.1), NFS_PORT (2049), EXPORT (/), NQN, NVME_PORT (4420),
#      LAYOUT (block), EXPECT_PNFS (1), RESTARTS (2), PHASE_MB (4),
#      RESTART_WAIT (180 s per restart, including the grace period).
SCENARIO=${SCENARIO:-restart-v${VERS:-4.1}}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

VERS=${VERS:-4.1}
NFS_PORT=${NFS_PORT:-2049}
EXPORT=${EXPORT:-/}
NQN=${NQN:-}
NVME_PORT=${NVME_PORT:-4420}
EXPECT_PNFS=${EXPECT_PNFS:-1}
RESTARTS=${RESTARTS:-2}
PHASE_MB=${PHASE_MB:-4}
RESTART_WAIT=${RESTART_WAIT:-180}
MNT=/mnt
DIR=pnfsd-vm-restart-$(date +%s)-$RANDOM
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) vers=$VERS nfs_port=$NFS_PORT restarts=$RESTARTS phase_mb=$PHASE_MB dir=$DIR"

if [[ -n $NQN ]]; then
    nvme_attach "$NVME_PORT" "$NQN" || die "nvme connect"
    # scsi: the partition scan before the client registers is refused (docs/pnfs.md)
    [[ ${LAYOUT:-block} == scsi ]] && { nvme_links; dmesg_mark; }
elif [[ $EXPECT_PNFS == 1 ]]; then
    die "NQN is not set"
fi
step "mount -t nfs -o vers=$VERS,port=$NFS_PORT $SERVER:$EXPORT $MNT"
mount -t nfs -o "vers=$VERS,port=$NFS_PORT${MOUNT_OPTS:+,$MOUNT_OPTS}" "$SERVER:$EXPORT" "$MNT" || die "nfs mount"
wait_grace "$MNT" || die "grace"
mkdir "$MNT/$DIR" || die "mkdir"

# One process holds the file open across every restart.
python3 - "$MNT/$DIR/held.bin" "$RESTARTS" "$PHASE_MB" "$RESTART_WAIT" <<'PY'
import hashlib, mmap, os, sys, time
path, restarts, phase_mb, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
size = phase_mb << 20
def say(*a): print(*a, flush=True)
def up(): return open("/proc/uptime").read().split()[0]
def verify(upto):
    """O_DIRECT read of [0, upto) through a second descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf, h, off = mmap.mmap(-1, 1 << 20), hashlib.sha256(), 0
    while off < upto:
        n = os.preadv(fd, [buf], off)
        if n <= 0: break
        h.update(buf[:min(n, upto - off)]); off += n
    os.close(fd)
    return h.hexdigest()
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
expect = hashlib.sha256()
ok = True
for phase in range(restarts + 1):
    data = os.urandom(size)
    t = time.monotonic()
    try:
        os.pwrite(fd, data, phase * size)
        os.fsync(fd)
    except OSError as e:
        say("CHECK phase-%d-write FAIL %s" % (phase, e)); ok = False; break
    expect.update(data)
    say("CHECK phase-%d-write-fsync ok %d MiB in %.2f s (uptime %s)" % (phase, phase_mb, time.monotonic() - t, up()))
    if phase == restarts:
        break
    i = phase + 1
    open("/host/out/restart-ready-%d" % i, "w").close()
    say("STEP [%s] waiting for the host to restart the server (restart %d)" % (up(), i))
    deadline = time.monotonic() + wait
    while not os.path.exists("/host/restart-done-%d" % i):
        if time.monotonic() > deadline:
            say("CHECK restart-%d FAIL the host hook did not answer in %d s" % (i, wait)); sys.exit(1)
        time.sleep(0.5)
    status = open("/host/restart-done-%d" % i).read().strip()
    if status not in ("", "0"):
        say("CHECK restart-%d-command FAIL the host's restart command exited %s" % (i, status)); ok = False
    t = time.monotonic()
    got = verify((phase + 1) * size)
    good = got == expect.hexdigest()
    say("CHECK restart-%d-data-intact %s %s (read after %.2f s)" % (i, "ok" if good else "FAIL", got, time.monotonic() - t))
    ok = ok and good
try:
    os.close(fd)
except OSError as e:
    say("CHECK close FAIL %s" % e); ok = False
open("/tmp/expect.sha256", "w").write(expect.hexdigest())
sys.exit(0 if ok else 1)
PY
check held-file $? "writes, fsyncs and reads across $RESTARTS restarts"

sync; echo 3 > /proc/sys/vm/drop_caches
got=$(dd if="$MNT/$DIR/held.bin" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
[[ $got == "$(cat /tmp/expect.sha256 2>/dev/null)" ]]; check final-readback $? "$got"
printf '%s  %s\n' "$got" "$DIR/held.bin" > /host/out/checksums.txt
counts "$MNT" end
cp /proc/self/mountstats /host/out/mountstats.txt
if [[ $EXPECT_PNFS == 1 ]]; then
    (( $(opcount "$MNT" LAYOUTGET) > 0 )); check layoutget $? "LAYOUTGET=$(opcount "$MNT" LAYOUTGET)"
    (( $(opcount "$MNT" LAYOUTCOMMIT) > 0 )); check layoutcommit $? "LAYOUTCOMMIT=$(opcount "$MNT" LAYOUTCOMMIT)"
fi
dmesg | grep -iE 'nfs|reclaim|grace|pnfs' | tail -20 | sed 's/^/KLOG /'
# The NVMe/TCP target lives in pnfsd: each restart drops the controller's connection,
# so the host's error recovery + reconnect is expected (an I/O error still fails).
dmesg | grep -E 'nvme[0-9]+: ' | sed 's/^/NVME /'
dmesg_check 'not responding|server [^ ]+ OK|nvme[0-9]+: starting error recovery'
umount "$MNT"; check umount $? "$MNT"
[[ -n $NQN ]] && nvme disconnect -n "$NQN" >/dev/null
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
