# lib.sh - helpers for scenarios running INSIDE the pnfsd test guest.
# Sourced by scenarios as /host/lib/lib.sh (run-guest.sh copies it there).
#
# Output convention (parsed by the host, one fact per line, `KEY k=v ...`):
#   STEP <text>                      progress, with the guest clock
#   COUNTS <label> OP=n ... WRITE_BYTES=n READ_BYTES=n   NFS client op counts
#   CHECK <name> ok|FAIL <detail>    an assertion
#   RESULT PASS|FAIL <scenario> [reason]   the verdict (last line)
# Host is 10.0.2.2 (QEMU user networking); the guest is 10.0.2.15.

# shellcheck shell=bash disable=SC2034  # (FAILED and SERVER are used by the scenarios)
SERVER=${SERVER:-10.0.2.2}
FAILED=0

uptime_s() { cut -d' ' -f1 /proc/uptime; }
step() { echo "STEP [$(uptime_s)] $*"; }
check() { # check NAME CONDITION-STATUS DETAIL
    if [[ $2 == 0 ]]; then echo "CHECK $1 ok $3"; else echo "CHECK $1 FAIL $3"; FAILED=1; fi
}
die() { echo "CHECK fatal FAIL $*"; echo "RESULT FAIL ${SCENARIO:-?} $*"; exit 1; }

# opstats MNT: "OP ops bytes_sent bytes_received" for every per-op line of the
# NFS mount at MNT in /proc/self/mountstats (fields: ops, transmissions,
# major timeouts, bytes sent, bytes received, ...).
opstats() {
    awk -v m="$1" '
        $1 == "device" { inm = ($5 == m) }
        inm && /per-op statistics/ { inops = 1; next }
        inm && inops && NF >= 9 && $1 ~ /:$/ { op = $1; sub(":", "", op); print op, $2, $5, $6 }
    ' /proc/self/mountstats
}
# opcount MNT OP [field: 2 = ops (default), 3 = bytes sent, 4 = bytes received]
opcount() {
    opstats "$1" | awk -v o="$2" -v f="${3:-2}" '$1 == o { print $f; found = 1 } END { if (!found) print 0 }'
}
# counts MNT LABEL: print the op counts the scenarios assert on, in one line
counts() {
    local m=$1 op line="COUNTS $2"
    for op in LAYOUTGET LAYOUTCOMMIT LAYOUTRETURN GETDEVICEINFO WRITE READ COMMIT OPEN CLOSE; do
        line+=" $op=$(opcount "$m" "$op")"
    done
    line+=" WRITE_BYTES=$(opcount "$m" WRITE 3) READ_BYTES=$(opcount "$m" READ 4)"
    echo "$line"
}
# layout_type MNT: the pnfs= value of the mount (LAYOUT_BLOCK_VOLUME, LAYOUT_SCSI, not configured)
layout_type() {
    awk -v m="$1" '$1 == "device" { inm = ($5 == m) } inm && /pnfs=/' /proc/self/mountstats |
        tr ',' '\n' | sed -n 's/^[[:space:]]*pnfs=//p' | head -n1
}

# nvme_links: exactly what udev's 60-persistent-storage.rules would make, no
# more: /dev/disk/by-id/nvme-$(cat /sys/block/<ns>/wwid). The kernel's wwid is
# uuid.<UUID> if the namespace reports one, else eui.<NGUID hex>, else
# eui.<EUI-64 hex>; the SCSI-layout client (>= 6.11) opens
# /dev/disk/by-id/nvme-eui.<designator hex>. So the layout only works here if
# the server's designator is what a udev'd host has a link for (docs/pnfs.md).
nvme_links() {
    local ns wwid
    mkdir -p /dev/disk/by-id
    for ns in $(nvme_namespaces); do
        wwid=$(cat "/sys/block/$ns/wwid" 2>/dev/null) || continue
        [[ -n $wwid ]] || continue
        ln -sfn "../../$ns" "/dev/disk/by-id/nvme-$wwid"
        echo "LINK /dev/disk/by-id/nvme-$wwid -> $ns"
    done
}

# nvme_namespaces: the namespace block devices (nvme0n1; not the per-path
# nodes nvme0c0n1 that native multipath hides behind them)
nvme_namespaces() {
    local d
    for d in /sys/block/nvme*n*; do
        [[ $(basename "$d") =~ ^nvme[0-9]+n[0-9]+$ ]] && basename "$d"
    done
}
has_nvme_ns() { [[ -n $(nvme_namespaces) ]]; }

# nvme_attach: discover + connect pnfsd's embedded target, wait for the namespace.
# The connect is tried up to 3 times: the host gives its TCP connect one SYN
# retry (nvme-tcp sets syncnt 1: ETIMEDOUT after ~3 s), and under TCG on a loaded
# machine QEMU's user network once answered neither SYN in time, although pnfsd
# was listening (connect -110 twice, no connection reached the target).
# Only that timeout is tried again: a target that refuses or fails the
# Connect fails at once, and one that never answers fails all three.
nvme_attach() { # nvme_attach PORT NQN
    local i err
    step "nvme discover -t tcp -a $SERVER -s $1"
    nvme discover -t tcp -a "$SERVER" -s "$1" || echo "NOTE nvme discover failed (connect may still work)"
    for ((i = 1; ; i++)); do
        step "nvme connect -t tcp -a $SERVER -s $1 -n $2"
        if err=$(nvme connect -t tcp -a "$SERVER" -s "$1" -n "$2" 2>&1); then
            [[ -n $err ]] && echo "$err"
            break
        fi
        echo "$err"
        [[ $err == *"timed out"* ]] && ((i < 3)) || return 1
        echo "NOTE nvme connect attempt $i timed out; trying again"
        sleep 2
    done
    for ((i = 0; i < 50; i++)); do
        has_nvme_ns && break
        sleep 0.2
    done
    nvme list
    has_nvme_ns
}

# wait_grace MNT [SECONDS]: OPENs get NFS4ERR_GRACE until the server's grace
# period ends; wait for it so the timed part of a scenario is not polluted.
wait_grace() {
    local i
    for ((i = 0; i < ${2:-120}; i++)); do
        if touch "$1/.grace-probe" 2>/dev/null; then rm -f "$1/.grace-probe"; return 0; fi
        sleep 1
    done
    return 1
}

# dmesg_mark: dmesg_check only looks at the kernel lines after this point
# (the SCSI layout: the partition scan at nvme connect, before the host has
# registered a key, is refused by design - see block-layout.sh).
DMESG_FROM=0
dmesg_mark() { DMESG_FROM=$(dmesg | wc -l); }

# nvme_teardown_mark: the scenario is about to tear an NVMe/TCP association down
# itself (an `nvme disconnect`, or a server restart that drops the connection).
# While the host deletes the controller it may fail a keep-alive it had queued
# but not sent ("failed nvme_keep_alive_end_io error=4", BLK_STS_TRANSPORT,
# sometimes after "long keepalive RTT" with a wrapped value; seen once in five
# nvme-target runs): the host's own abort, not a target fault. dmesg_check
# ignores those lines only when logged after the first mark, so the same line
# before any teardown still fails the check.
# A keep-alive already sent when the connection dropped is cancelled by the
# host's error recovery instead (nvme_cancel_request: "host aborted", which
# nvme_error_status makes BLK_STS_IOERR, "error=10"; seen once, in a CI
# crash-scsi-4.1 run, right after "starting error recovery" at a SIGKILL).
# That line is ignored only right after the same controller's "starting error
# recovery" line, after the mark: an error=10 anywhere else (the target
# answering Keep Alive with an error status) still fails the check.
NVME_TEARDOWN_ERE='failed nvme_keep_alive_end_io error=4|long keepalive RTT'
NVME_RECOVERY_ABORT_ERE='failed nvme_keep_alive_end_io error=10'
DMESG_TEARDOWN_FROM=
nvme_teardown_mark() { [[ -n $DMESG_TEARDOWN_FROM ]] || DMESG_TEARDOWN_FROM=$(dmesg | wc -l); }

# dmesg_check [IGNORE_ERE]: the kernel falls back to NFS READ/WRITE silently on
# layout trouble; these lines are the only trace in the log. IGNORE_ERE: lines
# a scenario expects (restart.sh: "not responding" while the server is down).
# Looks at the lines after dmesg_mark, less the teardown lines nvme_teardown_mark
# allows.
dmesg_check() {
    local bad
    bad=$(dmesg | awk -v from="$DMESG_FROM" -v td="${DMESG_TEARDOWN_FROM:--1}" -v ere="$NVME_TEARDOWN_ERE" \
        -v abort="$NVME_RECOVERY_ABORT_ERE" '
        function ctrl(l) { return match(l, /nvme[0-9]+: /) ? substr(l, RSTART, RLENGTH) : "?" }
        {
            torn = td >= 0 && NR > td
            recovery_abort = $0 ~ abort && prev ~ /nvme[0-9]+: starting error recovery/ && ctrl($0) == ctrl(prev)
            if (NR > from && !(torn && ($0 ~ ere || recovery_abort))) print
            prev = $0
        }' |
        grep -iE 'pnfs.*(fail|error|fallback)|layout.*(fail|error)|blocklayout|bl_|blk_update_request|I/O error|nvme.*(error|timeout|reset)|dm-[0-9]+.*error|nfs.*(error|not responding)' |
        grep -viE 'pNFS: using block device|loaded|registered|Modules linked' |
        grep -vE "${1:-^\$}" || true)
    if [[ -n $bad ]]; then
        while IFS= read -r l; do echo "DMESG $l"; done <<< "$bad"
        check dmesg 1 "suspicious kernel messages (see DMESG lines)"
    else
        check dmesg 0 "no pNFS fallback / I/O error lines"
    fi
}
