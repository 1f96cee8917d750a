#!/bin/bash
# bench-nvme-fio.sh - the guest fio measurement of the target: boots the
# test guest with scenarios/nvme-fio.sh, which runs fio (io_uring engine, QD 1
# and 32, 4 KiB random read/write) against the guest's own RAM disk, against
# our target (the nvme-tcp crate's `target` example, copied into the guest) and
# against Linux nvmet-tcp on the same RAM disk, all in the same guest.
#
# usage: deploy/vm/bench-nvme-fio.sh [TARGET_BIN]
#        (default $CARGO_TARGET_DIR or target/ + release/examples/target;
#         build it with cargo build --release -p nvme-tcp --example target --example echo:
#         the `echo` example beside it, when there, measures the transport's floor in the
#         guest)
# Env: ROUNDS, RUNTIME, JOBS, BS, NVME_TCP_NO_URING, TRACE (passed to the scenario), KVER and the
# run-guest.sh knobs (VM_SMP 2, VM_MEM 2048). The host's binary runs in the
# guest: both are Debian bookworm (glibc 2.36).
# Exit status: the scenario's. The table is in the run's out/output.log
# (lines starting with TABLE) and out/fio.tsv.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/target}
[[ -x $BIN ]] || { echo "bench-nvme-fio: no target binary at $BIN (cargo build --release -p nvme-tcp --example target)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/nvme-fio.XXXXXX")
cp "$BIN" "$T/nvme-target"
FILES="$T/nvme-target"
# The transport's floor in the same guest: the crate's `echo` example, built beside it.
ECHO=$(dirname "$BIN")/echo
if [[ -x $ECHO ]]; then
    cp "$ECHO" "$T/nvme-echo"
    FILES+=" $T/nvme-echo"
else
    echo "bench-nvme-fio: no $ECHO (cargo build --release -p nvme-tcp --example echo): no echo floor" >&2
fi
ENVS=()
for v in ROUNDS RUNTIME JOBS BS NVME_TCP_NO_URING TRACE; do [[ -n ${!v:-} ]] && ENVS+=(-e "$v=${!v}"); done
VM_FILES="$FILES${VM_FILES:+ $VM_FILES}" "$HERE/run-guest.sh" "${ENVS[@]}" "$HERE/scenarios/nvme-fio.sh"
rc=$?
rm -rf "$T"
exit $rc
