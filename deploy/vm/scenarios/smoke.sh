#!/bin/bash
# smoke.sh - proves the guest image: the tools the pNFS scenarios use exist and
# run, the modules are loaded (or load), rpc_pipefs is where blkmapd looks,
# blkmapd is running, and the host (10.0.2.2) is on the local network.
# No server needed. Exit 0 only if every check passes.
SCENARIO=smoke
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh

step "kernel $(uname -r)"
for t in mount.nfs blkmapd nvme fio sha256sum python3 dmsetup modprobe ip; do
    p=$(command -v "$t"); check "tool-$t" $? "${p:-missing}"
done
check mount.nfs-runs "$(mount.nfs -V >/dev/null 2>&1; echo $?)" "$(mount.nfs -V 2>&1 | head -n1)"
check nvme-runs "$(nvme version >/dev/null 2>&1; echo $?)" "$(nvme version 2>&1 | head -n1)"
check fio-runs "$(fio --version >/dev/null 2>&1; echo $?)" "$(fio --version 2>&1)"

for m in sunrpc nfsv4 blocklayoutdriver dm_mod nvme_tcp nvme_fabrics 9p virtio_net; do
    modprobe "$m" 2>/dev/null
    grep -q "^$m " /proc/modules || [[ -d /sys/module/$m ]]
    check "module-$m" $? "$(grep "^$m " /proc/modules | cut -d' ' -f1-2)"
done
[[ -e /run/rpc_pipefs/nfs ]]; check rpc_pipefs $? "/run/rpc_pipefs/nfs"
sleep 1
pgrep -x blkmapd >/dev/null; check blkmapd-running $? "$(pgrep -a blkmapd)"
[[ -e /run/rpc_pipefs/nfs/blocklayout ]]; check blocklayout-pipe $? "/run/rpc_pipefs/nfs/blocklayout"
[[ -e /dev/nvme-fabrics ]]; check nvme-fabrics-dev $? "/dev/nvme-fabrics"
ip -4 addr show eth0 | grep -q 10.0.2.15; check eth0 $? "$(ip -4 -o addr show eth0 | awk '{print $4}')"
[[ -z $(ip route show default) ]]; check no-default-route $? "$(ip route | tr '\n' ';')"
busybox ping -c1 -W2 10.0.2.2 >/dev/null 2>&1; check ping-host $? "10.0.2.2 (slirp answers ICMP for the host)"
cat /etc/nvme/hostnqn

if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
