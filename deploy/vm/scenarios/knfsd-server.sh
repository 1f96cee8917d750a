#!/bin/bash
# knfsd-server.sh - a STAND-IN pNFS block-layout server in a guest: Linux
# knfsd exporting XFS with the `pnfs` option, and nvmet exporting the same
# block device over NVMe/TCP. Used by deploy/vm/anchor.sh to prove the client
# scenarios (block-layout.sh, restart.sh) against a real pNFS server, with the
# same network path pnfsd will have: the client guest reaches it through the
# host's loopback (QEMU hostfwd 127.0.0.1:<port> -> this guest).
#
# LAYOUT=block (default): XFS sits on a brd RAM disk, which has no
# persistent-reservation ops, so knfsd offers only the block layout (type 3).
# LAYOUT=scsi (6.12 kernel): XFS sits on the server's own NVMe view of the
# same namespace (nvme-loop), which has PR ops and a unique id, so knfsd also
# offers the SCSI layout (type 5), which the Linux client prefers. NOTE: 6.12's
# nvmet implements no reservations, so the client's key registration fails
# and the client falls back to the MDS; this variant only exercises the
# GETDEVICEINFO -> /dev/disk/by-id/nvme-eui.* path.
#
# Env: NQN (nqn.2026-11.org.pnfsd:knfsd-anchor), DISK_MB (512), LAYOUT
#      (block), SERVE_SECONDS (1200).
# Handshake: writes out/server-ready when serving; restarts knfsd when the host
# creates /host/restart-<n> (answers out/restarted-<n>); stops when the host
# creates /host/stop. Before stopping it checks every /host/checks/*.sha256 (the
# clients' checksums.txt, paths relative to /export) against the bytes XFS
# has on the device, after dropping its caches: CHECK served-bytes-<name>.
SCENARIO=knfsd-server
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh
NQN=${NQN:-nqn.2026-11.org.pnfsd:knfsd-anchor}
DISK_MB=${DISK_MB:-512}

step "brd ${DISK_MB} MiB"
modprobe brd rd_nr=1 rd_size=$((DISK_MB * 1024)) max_part=0 || die "brd"
modprobe -a xfs nfsd nvmet nvmet_tcp || die "server modules"
DISK=/dev/ram0

step "nvmet: $DISK as $NQN namespace 1 on 10.0.2.15:4420/tcp"
C=/sys/kernel/config/nvmet
mkdir "$C/subsystems/$NQN" "$C/subsystems/$NQN/namespaces/1" "$C/ports/1" || die "nvmet configfs"
echo 1 > "$C/subsystems/$NQN/attr_allow_any_host"
echo "$DISK" > "$C/subsystems/$NQN/namespaces/1/device_path"
# an NGUID: the SCSI layout names the volume by it (nvmet sets only a UUID)
cat /proc/sys/kernel/random/uuid > "$C/subsystems/$NQN/namespaces/1/device_nguid"
echo 1 > "$C/subsystems/$NQN/namespaces/1/enable" || die "nvmet namespace enable"
echo tcp > "$C/ports/1/addr_trtype"
echo ipv4 > "$C/ports/1/addr_adrfam"
echo 10.0.2.15 > "$C/ports/1/addr_traddr"
echo 4420 > "$C/ports/1/addr_trsvcid"
ln -s "$C/subsystems/$NQN" "$C/ports/1/subsystems/$NQN" || die "nvmet port"

FSDEV=$DISK
if [[ ${LAYOUT:-block} == scsi ]]; then
    step "nvme-loop: the server's own NVMe view of the namespace"
    modprobe nvme_loop || die "nvme_loop"
    mkdir "$C/ports/2" && echo loop > "$C/ports/2/addr_trtype" &&
        ln -s "$C/subsystems/$NQN" "$C/ports/2/subsystems/$NQN" || die "nvmet loop port"
    nvme connect -t loop -n "$NQN" || die "nvme connect -t loop"
    for ((i = 0; i < 50; i++)); do has_nvme_ns && break; sleep 0.2; done
    FSDEV=/dev/$(nvme_namespaces | head -n1)
    nvme list
    grep -H . /sys/block/nvme*n*/{eui,nguid,wwid} 2>/dev/null
fi
step "mkfs.xfs $FSDEV, mount /export"
mkfs.xfs -f -q "$FSDEV" || die "mkfs.xfs"
mkdir -p /export
mount -t xfs "$FSDEV" /export || die "mount xfs"
chmod 1777 /export

step "knfsd: export /export with pnfs, grace 10 s"
mount -t nfsd nfsd /proc/fs/nfsd || die "nfsd fs"
mkdir -p /var/lib/nfs/v4recovery   # client records, so reclaims after a restart are allowed
echo 10 > /proc/fs/nfsd/nfsv4gracetime
echo 10 > /proc/fs/nfsd/nfsv4leasetime
# insecure: slirp re-originates the client's connections from unprivileged ports
echo '/export *(rw,pnfs,no_root_squash,sync,insecure,no_subtree_check)' > /etc/exports
rpcbind || die rpcbind
rpc.mountd --no-udp -N 2 -N 3 || die rpc.mountd
rpc.nfsd -N 3 -V 4.1 -V 4.2 8 || die rpc.nfsd
exportfs -ra || die exportfs
exportfs -v
echo "nfsd versions: $(cat /proc/fs/nfsd/versions)"
echo "NQN=$NQN" > /host/out/server-ready
step "serving; waiting for /host/stop (max ${SERVE_SECONDS:-1200} s)"
# /host/restart-<n> (from anchor.sh's restart hook): restart knfsd, which drops
# all state and starts a new grace period, as a server reboot does; clients
# reclaim from the records in /var/lib/nfs/v4recovery.
n=1
for ((i = 0; i < ${SERVE_SECONDS:-1200}; i++)); do
    [[ -e /host/stop ]] && break
    if [[ -e /host/restart-$n ]]; then
        step "restart $n: rpc.nfsd 0; rpc.nfsd 8"
        rpc.nfsd 0
        rpc.nfsd -N 3 -V 4.1 -V 4.2 8; check "knfsd-restart-$n" $? "grace $(cat /proc/fs/nfsd/nfsv4gracetime) s"
        touch "/host/out/restarted-$n"
        n=$((n + 1))
    fi
    sleep 1
done

step "checking the clients' checksums against the bytes on the device"
sync; echo 3 > /proc/sys/vm/drop_caches
for f in /host/checks/*.sha256; do
    [[ -e $f ]] || continue
    (cd /export && sha256sum -c --quiet "$f"); check "served-bytes-$(basename "$f" .sha256)" $? "$f"
done
echo "SERVER_OPS $(grep proc4ops /proc/net/rpc/nfsd)"
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
