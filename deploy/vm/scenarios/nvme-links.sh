#!/bin/bash
# nvme-links.sh - self-test of lib.sh:nvme_links without any server: an nvmet
# subsystem inside the guest (brd RAM disk, known NGUID) is attached over
# nvme-loop (6.12 kernel; 6.1 has no nvme-loop), then the
# /dev/disk/by-id/nvme-<wwid> link udev would make must exist and resolve to
# the namespace device (nvmet reports a UUID, so that is nvme-uuid.*, a name
# the SCSI-layout client never opens: see docs/pnfs.md).
SCENARIO=nvme-links
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh
NQN=nqn.2026-11.org.pnfsd:links-selftest
NGUID=11223344-5566-7788-99aa-bbccddeeff00
modprobe brd rd_nr=1 rd_size=65536 && modprobe -a nvmet nvme_loop || die "modules"
C=/sys/kernel/config/nvmet
mkdir "$C/subsystems/$NQN" "$C/subsystems/$NQN/namespaces/1" "$C/ports/2" || die "configfs"
echo 1 > "$C/subsystems/$NQN/attr_allow_any_host"
echo /dev/ram0 > "$C/subsystems/$NQN/namespaces/1/device_path"
echo "$NGUID" > "$C/subsystems/$NQN/namespaces/1/device_nguid"
echo 1 > "$C/subsystems/$NQN/namespaces/1/enable" || die "namespace enable"
echo loop > "$C/ports/2/addr_trtype"
ln -s "$C/subsystems/$NQN" "$C/ports/2/subsystems/$NQN" || die "port"
nvme connect -t loop -n "$NQN" || die "nvme connect -t loop"
for ((i = 0; i < 50; i++)); do has_nvme_ns && break; sleep 0.2; done
ns=$(nvme_namespaces | head -n1)
[[ -n $ns ]]; check namespace $? "${ns:-none} ($(ls /sys/block | tr '\n' ' '))"
nvme_links
link=/dev/disk/by-id/nvme-$(cat "/sys/block/$ns/wwid")
[[ $(readlink -f "$link") == /dev/$ns ]]; check wwid-link $? "$link -> $(readlink -f "$link")"
# nvmet's namespace UUID wins the wwid: no nvme-eui.<nguid>, the name the SCSI-layout
# client would open for this NGUID (measured: nvme-uuid.<uuid> only)
[[ ! -e /dev/disk/by-id/nvme-eui.${NGUID//-/} ]]; check no-eui-link-with-uuid $? "$(ls /dev/disk/by-id | tr '\n' ' ')"
nvme disconnect -n "$NQN" >/dev/null
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
