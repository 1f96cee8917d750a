#!/bin/bash
# run-guest.sh - boot the pnfsd test guest under QEMU/TCG, run one scenario in
# it, power off, exit with the scenario's exit status.
#
# usage: deploy/vm/run-guest.sh [-e NAME=VALUE]... SCENARIO.sh   [-- extra qemu args]
#        deploy/vm/run-guest.sh [-e NAME=VALUE]... -c 'COMMAND'  [-- extra qemu args]
#
#   -e NAME=VALUE   exported in the guest before the scenario runs (repeatable;
#                   e.g. -e VERS=4.2 -e NFS_PORT=2049 -e NQN=... -e NVME_PORT=4420)
#   -c COMMAND      run a shell command instead of a scenario file
#
# The guest image comes from build-guest.sh (called here; it returns at once
# when the image is up to date). Each run gets a directory
#   $PNFSD_VM_DIR/runs/<stamp>-<name>/       (or $VM_RUN_DIR if set)
# shared with the guest by virtio-9p and mounted there at /host:
#   scenario, env, lib/ (a copy of scenarios/: lib.sh and the rest), files of $VM_FILES
#   out/output.log  the scenario's stdout+stderr     out/rc        its exit status
#   out/dmesg.log   the guest kernel log            out/blkmapd.log, out/modprobe.log
#   out/boot-timing.log  guest uptime at each boot step     console.log  serial console
# The scenario runs with /host/out as its working directory: files it writes
# there (checksums, mountstats) are on the host after the run.
#
# Exit status: the scenario's; 125 if the guest produced none (timeout, panic,
# no 9p share), 2 for a usage error.
#
# Environment: KVER (6.12) and PNFSD_VM_DIR (/var/tmp/pnfsd-vm) as for
# build-guest.sh; VM_MEM (2048 MiB), VM_SMP (2), VM_TIMEOUT (600 s),
# VM_VERBOSE=1 (stream the console live), VM_APPEND (extra kernel command
# line, e.g. pnfsd.modules=xfs), VM_CPU (max), VM_FILES (files copied into the
# run directory), VM_NETDEV_OPTS (extra -netdev user options), VM_RUN_DIR,
# VM_HOST_HOOK (a host command started in the background as `$VM_HOST_HOOK
# RUN_DIR` while the guest runs, and stopped after; e.g. restart-hook.sh).
#
# Network: QEMU user-mode networking only. The guest is 10.0.2.15/24, the
# host's loopback is 10.0.2.2; ipv6=off and no default route or DNS in the
# guest, so it cannot address anything beyond the host. Servers on the host
# see the guest's connections as coming from 127.0.0.1 on UNPRIVILEGED ports
# (slirp re-originates them), so they must accept non-reserved source ports.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

ENVS=() CMD="" SCEN=""
while (($#)); do
    case $1 in
        -e) [[ $# -ge 2 && $2 == [A-Za-z_]*=* ]] || usage; ENVS+=("$2"); shift 2 ;;
        -c) [[ $# -ge 2 ]] || usage; CMD=$2; shift 2 ;;
        -h|--help) usage ;;
        --) shift; break ;;
        -*) usage ;;
        *) [[ -z $SCEN ]] || usage; SCEN=$1; shift ;;
    esac
done
[[ -n $CMD || -n $SCEN ]] || usage
[[ -z $CMD || -z $SCEN ]] || usage
[[ -z $SCEN || -r $SCEN ]] || { echo "run-guest: no such scenario: $SCEN" >&2; exit 2; }

IMG=$("$HERE/build-guest.sh" | tail -n1) || { echo "run-guest: build-guest.sh failed" >&2; exit 125; }
KERNEL=$IMG/vmlinux                    # ELF via PVH: no decompression under TCG
[[ -s $KERNEL ]] || KERNEL=$IMG/vmlinuz

name=$(basename "${SCEN:-cmd}" .sh)
RUN=${VM_RUN_DIR:-$VM_DIR/runs/$(date +%Y%m%d-%H%M%S)-$name-$$}
mkdir -p "$RUN/out" "$RUN/lib"
rm -f "$RUN/out/rc"
if [[ -n $SCEN ]]; then cp "$SCEN" "$RUN/scenario"; else printf '%s\n' "$CMD" > "$RUN/scenario"; fi
cp "$HERE"/scenarios/*.sh "$RUN/lib/"        # lib.sh + scenarios that reuse others
for f in ${VM_FILES:-}; do cp -a "$f" "$RUN/"; done
: > "$RUN/env"
for kv in "${ENVS[@]}"; do printf '%s=%q\n' "${kv%%=*}" "${kv#*=}" >> "$RUN/env"; done
echo "[run-guest] kernel $(basename "$IMG"), run directory $RUN" >&2

if [[ ${VM_VERBOSE:-0} == 1 ]]; then
    CON=(-chardev "stdio,id=con,signal=off,logfile=$RUN/console.log")
    LOGLEVEL=7
else
    CON=(-chardev "file,id=con,path=$RUN/console.log")
    LOGLEVEL=4
fi

# Under TCG with several vCPUs the guest kernel now and then dies of "Oops: int3" in code it is
# live-patching (jump labels, text_poke_bp): QEMU's cross-vCPU code modification, not the test
# (seen twice in 143 suite runs, at boot and mid-run). Such a boot is retried once from scratch
# (VM_OOPS_RETRIES), saying so; any other failure is the test's.
attempt=0
while :; do
HOOKPID=""
if [[ -n ${VM_HOST_HOOK:-} ]]; then
    bash -c "$VM_HOST_HOOK \"\$1\"" host-hook "$RUN" &
    HOOKPID=$!
fi

t0=$(date +%s%N)
# -nodefaults/-vga none: only the devices below; romfile=: no option ROM to run
timeout -k 10 "${VM_TIMEOUT:-600}" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu "${VM_CPU:-max}" -smp "${VM_SMP:-2}" -m "${VM_MEM:-2048}" \
    -machine pc -nodefaults -no-user-config -display none -vga none -no-reboot \
    -kernel "$KERNEL" -initrd "$IMG/guest.cpio" \
    -append "console=ttyS0 loglevel=$LOGLEVEL panic=1 no_timer_check pnfsd.verbose=${VM_VERBOSE:-0} ${VM_APPEND:-}" \
    "${CON[@]}" -serial chardev:con -monitor none \
    -netdev "user,id=n0,ipv6=off${VM_NETDEV_OPTS:+,$VM_NETDEV_OPTS}" \
    -device virtio-net-pci,netdev=n0,romfile= \
    -virtfs "local,path=$RUN,mount_tag=host,security_model=none,id=host" \
    "$@" < /dev/null
qrc=$?
if [[ -n $HOOKPID ]]; then kill "$HOOKPID" 2>/dev/null; wait "$HOOKPID" 2>/dev/null; fi
if [[ ! -s $RUN/out/rc ]] && grep -q 'Oops: int3' "$RUN/console.log" 2>/dev/null \
    && ((attempt < ${VM_OOPS_RETRIES:-1})); then
    attempt=$((attempt + 1))
    mv "$RUN/console.log" "$RUN/console.oops-$attempt.log"
    rm -rf "$RUN/out"; mkdir -p "$RUN/out"
    echo "[run-guest] RETRY guest kernel died of 'Oops: int3' (TCG code-patching race, not the test); console kept as console.oops-$attempt.log" >&2
    continue
fi
break
done
wall=$(( ($(date +%s%N) - t0) / 1000000 ))

[[ ${VM_VERBOSE:-0} == 1 ]] || cat "$RUN/out/output.log" 2>/dev/null
boot=$(awk '$2=="ready" {print $1}' "$RUN/out/boot-timing.log" 2>/dev/null)
printf '[run-guest] qemu exit %s, wall %d.%03d s, guest ready at %s s (guest clock), results in %s\n' \
    "$qrc" $((wall / 1000)) $((wall % 1000)) "${boot:-?}" "$RUN" >&2
if [[ ! -s $RUN/out/rc ]]; then
    echo "[run-guest] no exit status from the guest (qemu exit $qrc; 124 = timeout); console tail:" >&2
    tail -n 30 "$RUN/console.log" >&2
    exit 125
fi
exit "$(cat "$RUN/out/rc")"
