#!/usr/bin/env bash
# lib-test.sh - checks lib.sh's dmesg_check on canned kernel logs, on the host
# (no guest needed): `bash deploy/vm/scenarios/lib-test.sh`. Exit 0 when all pass.
# run-guest.sh copies it into the guest with the rest; no scenario runs it.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

CANNED=()
dmesg() { printf '%s\n' "${CANNED[@]}"; }   # stands in for the kernel log

fails=0
expect() { # expect NAME ok|FAIL IGNORE_ERE: dmesg_check's verdict on CANNED
    local got
    got=$(dmesg_check "${3:-}" | awk '$1 == "CHECK" { print $3 }')
    if [[ $got == "$2" ]]; then echo "ok   $1"; else echo "FAIL $1: dmesg_check said $got, want $2"; fails=1; fi
}
reset() { DMESG_FROM=0; DMESG_TEARDOWN_FROM=; FAILED=0; CANNED=("$@"); }

KA='nvme nvme0: failed nvme_keep_alive_end_io error=4'
RTT='nvme nvme0: long keepalive RTT (4294967 ms)'

reset 'nvme nvme0: new ctrl: NQN "nqn.x"' 'nvme0n1: p1'
expect clean-log ok

reset 'nvme nvme0: new ctrl' "$KA"
expect keep-alive-abort-without-teardown-fails FAIL

reset 'nvme nvme0: new ctrl'
nvme_teardown_mark
CANNED+=("$RTT" "$KA" 'nvme nvme0: Removing ctrl: NQN "nqn.x"')
expect keep-alive-abort-after-teardown-mark ok

# Before the mark the abort still counts, after it an I/O error still counts.
reset "$KA"
nvme_teardown_mark
CANNED+=('nvme nvme0: Removing ctrl')
expect abort-before-the-mark-fails FAIL
reset 'nvme nvme0: new ctrl'
nvme_teardown_mark
CANNED+=("$KA" 'blk_update_request: I/O error, dev nvme0n1, sector 8')
expect io-error-after-the-mark-fails FAIL

# Another keep-alive error code is not the teardown race.
reset 'x'
nvme_teardown_mark
CANNED+=('nvme nvme0: failed nvme_keep_alive_end_io error=10')
expect other-keep-alive-error-fails FAIL

# A keep-alive cancelled by the error recovery of a dropped connection (a
# SIGKILL of the server after the mark) is the teardown too...
REC='nvme nvme0: starting error recovery'
reset 'x'
nvme_teardown_mark
CANNED+=("$REC" 'nvme nvme0: failed nvme_keep_alive_end_io error=10' 'nvme nvme0: Reconnecting in 10 seconds...')
expect keep-alive-cancelled-by-recovery-after-the-mark ok 'starting error recovery'
# ...but not before the mark, nor without the recovery line right before it,
# nor after another controller's recovery.
reset "$REC" 'nvme nvme0: failed nvme_keep_alive_end_io error=10'
expect recovery-abort-before-the-mark-fails FAIL 'starting error recovery'
reset 'x'
nvme_teardown_mark
CANNED+=("$REC" 'nvme nvme0: Reconnecting in 10 seconds...' 'nvme nvme0: failed nvme_keep_alive_end_io error=10')
expect error-10-not-right-after-recovery-fails FAIL 'starting error recovery'
reset 'x'
nvme_teardown_mark
CANNED+=('nvme nvme1: starting error recovery' 'nvme nvme0: failed nvme_keep_alive_end_io error=10')
expect error-10-after-another-controllers-recovery-fails FAIL 'starting error recovery'

# A second mark does not move the first (the abort between the two is still allowed).
reset 'x'
nvme_teardown_mark
CANNED+=("$KA" 'y')
nvme_teardown_mark
CANNED+=("$KA")
expect second-mark-keeps-the-first ok

# dmesg_mark and a scenario's own ignore pattern work as before.
reset 'blk_update_request: I/O error, dev nvme0n1' 'ok line'
dmesg_mark
CANNED+=('nfs: server 10.0.2.2 not responding, still trying')
expect not-responding-after-dmesg-mark-fails FAIL
expect before-dmesg-mark-and-ignore-pattern-pass ok 'not responding'

exit $fails
