#!/bin/bash
# client-suite.sh - every Linux-client scenario against a pNFS
# server already running on the host (pnfsd), one guest boot per scenario,
# with a summary table at the end. Meant to be called by .ci/run.
#
# usage: NQN=<subsystem NQN> [NFS_PORT=2049] [NVME_PORT=4420] [EXPORT=/]
#        [LAYOUTS="block scsi"] [VERSIONS="4.1 4.2"]
#        [RESTART_CMD='<command; gets 1 then 2>'] [RESTART_VERSIONS="4.1"]
#        [CAT_CMD='<command printing the bytes of export-relative path $1>']
#        [FENCED_VERSIONS="4.2"]  (scsi-fenced.sh, after the layout runs)
#        [RESTART_LAYOUT=block|scsi]  (the layout of the restart runs; default block)
#        [EXPECT_PNFS=0|1]  (passed to the scenarios when set)
#        [CRASH_CMD='<command; gets the signal list and restart number i>']
#        [CRASH_LAYOUTS="block scsi"] [CRASH_VERSIONS="4.1 4.2"]
#        [CRASH_SIGNALS="KILL KILL+KILL TERM"]  (crash-write.sh: one run per
#          layout and version, one restart per word, KILL+KILL = two in a row)
#        [SCSI_EXPECT_LAYOUT_AFTER_CRASH=1|0]  (0: the SCSI crash runs may fall back to the MDS)
#        [CRASH_NAME=crash]  (the crash runs' name: <CRASH_NAME>-<layout>-<version>)
#        [CRASH_EXTRA_ENV='NAME=VALUE ...']  (more env for crash-write.sh, e.g. MDS_WRITE_LIMIT)
#        [METRICS_PORT=<the server's metrics port>]  (crash-write.sh reads its counters)
#        [GUIDE=1]  (admin-guide.sh: docs/admin-guide.md's client commands)
#        [META_CMD='<command; gets i: restarts the server with delegations off for odd
#          i, on for even i>'] [META_VERSIONS="4.2"] [META_LAYOUT=block] [META_ROUNDS=3]
#          [META_FILES=400] [META_TIMEOUT=2400]  (deleg-metadata.sh, last)
#        deploy/vm/client-suite.sh
#
# - LAYOUTS: the layout the server offers for each run; the server must be
#   configured accordingly between runs (SWITCH_LAYOUT_CMD, if set, is run
#   as `$SWITCH_LAYOUT_CMD block|scsi` before the runs of that layout).
# - RESTART_CMD: restarts the server (1 = SIGTERM, 2 = SIGKILL is the
#   convention); without it the restart scenario is skipped.
# - CAT_CMD: how the host reads a file as the server serves it, to compare
#   with the checksums computed in the guest; without it that check is skipped.
# - CHECKSUMS_DIR: copy each run's checksums.txt there as <run>.sha256 (used by
#   anchor.sh, whose server guest checks them itself).
# Exit 0 only if every run passed. Results: one run directory per scenario
# under $PNFSD_VM_DIR/runs, their logs next to them.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${NQN:?set NQN to the NVMe subsystem NQN of the server}"
NFS_PORT=${NFS_PORT:-2049}
NVME_PORT=${NVME_PORT:-4420}
EXPORT=${EXPORT:-/}
VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
mkdir -p "$VM_DIR/runs"

"$HERE/build-guest.sh" >/dev/null || exit 125
SUMMARY=()
rc=0
run() { # run NAME SCENARIO VERS [extra env...]
    local name=$1 scen=$2 vers=$3 dir log r extra=() hb=""
    shift 3
    for e in "$@"; do extra+=(-e "$e"); done
    [[ -z ${EXPECT_PNFS:-} ]] || extra+=(-e "EXPECT_PNFS=$EXPECT_PNFS")
    [[ -z ${METRICS_PORT:-} ]] || extra+=(-e "METRICS_PORT=$METRICS_PORT")
    dir=$VM_DIR/runs/$(date +%Y%m%d-%H%M%S)-suite-$name-$$
    log=$dir.log
    echo "[suite] $name: $dir" >&2
    VM_RUN_DIR=$dir "$HERE/run-guest.sh" -e VERS="$vers" -e NFS_PORT="$NFS_PORT" \
        -e NVME_PORT="$NVME_PORT" -e NQN="$NQN" -e EXPORT="$EXPORT" "${extra[@]}" "$scen" > "$log" 2>&1
    r=$?
    if ((r == 0)) && [[ -n ${CAT_CMD:-} ]]; then
        local n=0 ok=0
        if [[ -s $dir/out/checksums.txt ]]; then
            while read -r sum path; do
                n=$((n + 1))
                got=$(set -o pipefail; bash -c "$CAT_CMD \"\$1\"" cat "$path" | sha256sum | cut -d' ' -f1) || got="(CAT_CMD failed)"
                if [[ $got == "$sum" ]]; then echo "CHECK host-bytes ok $path $sum" >> "$log"; ok=$((ok + 1))
                else echo "CHECK host-bytes FAIL $path: guest $sum host $got" >> "$log"; r=1; fi
            done < "$dir/out/checksums.txt"
        fi
        # a scenario that passed must have left something to compare
        ((n > 0)) || { echo "CHECK host-bytes FAIL no checksums.txt from the guest" >> "$log"; r=1; }
        hb=" host-bytes=$ok/$n"
    fi
    if [[ -n ${CHECKSUMS_DIR:-} && -s $dir/out/checksums.txt ]]; then
        cp "$dir/out/checksums.txt" "$CHECKSUMS_DIR/$name.sha256"
    fi
    grep -E '^(CHECK .* FAIL|CHECK host-bytes|RESULT|\[run-guest\] RETRY)' "$log" | sed "s/^/[$name] /" >&2
    # crash-write.sh: seconds from each restart to the first LAYOUTCOMMIT answered OK, and
    # what the client sent after the first restart
    local fc ar
    fc=$(sed -n 's/^FIRST_COMMIT restart=[0-9]* signal=\([^ ]*\) seconds=\([^ ]*\).*/\1:\2/p' "$log" | paste -sd/ -)
    ar=$(grep -m1 '^AFTER_RESTART' "$log" | cut -d' ' -f2-)
    SUMMARY+=("$(printf '%-18s %-4s %s%s%s%s' "$name" "$( ((r == 0)) && echo PASS || echo FAIL)" \
        "$(grep -E '^COUNTS end' "$log" | cut -d' ' -f3-)" "$hb" "${fc:+ first_commit=$fc}" "${ar:+ after_restart: $ar}")")
    ((r == 0)) || rc=1
}

for layout in ${LAYOUTS-block scsi}; do
    [[ -z ${SWITCH_LAYOUT_CMD:-} ]] || bash -c "$SWITCH_LAYOUT_CMD $layout" >&2 || rc=1
    for v in ${VERSIONS:-4.1 4.2}; do
        run "$layout-$v" "$HERE/scenarios/$layout-layout.sh" "$v"
    done
done
# scsi-fenced.sh: the SCSI-layout client after its registration is gone (measurements;
# needs SWITCH_LAYOUT_CMD unless the server already offers scsi)
for v in ${FENCED_VERSIONS:-}; do
    [[ -z ${SWITCH_LAYOUT_CMD:-} || ${layout:-} == scsi ]] || { bash -c "$SWITCH_LAYOUT_CMD scsi" >&2 || rc=1; layout=scsi; }
    run "scsi-fenced-$v" "$HERE/scenarios/scsi-fenced.sh" "$v"
done
if [[ -n ${RESTART_CMD:-} ]]; then
    # the restart scenario runs on RESTART_LAYOUT (block)
    rl=${RESTART_LAYOUT:-block}
    [[ -z ${SWITCH_LAYOUT_CMD:-} || ${layout:-block} == "$rl" ]] || bash -c "$SWITCH_LAYOUT_CMD $rl" >&2 || rc=1
    rn=restart; [[ $rl == block ]] || rn=restart-$rl
    for v in ${RESTART_VERSIONS:-4.1}; do
        VM_HOST_HOOK="$HERE/restart-hook.sh $(printf '%q' "$RESTART_CMD")" run "$rn-$v" "$HERE/scenarios/restart.sh" "$v" LAYOUT="$rl"
    done
else
    SUMMARY+=("restart            SKIP (no RESTART_CMD)")
fi
# crash-write.sh: the server dies while fio writes through the layout
if [[ -n ${CRASH_CMD:-} ]]; then
    sigs=${CRASH_SIGNALS:-KILL KILL+KILL TERM}
    n=$(wc -w <<< "$sigs")
    for cl in ${CRASH_LAYOUTS-block scsi}; do
        [[ -z ${SWITCH_LAYOUT_CMD:-} ]] || bash -c "$SWITCH_LAYOUT_CMD $cl" >&2 || rc=1
        for v in ${CRASH_VERSIONS:-4.1 4.2}; do
            # Each restart lets fio write 15-25 MiB before the host answers (NVMe reconnect,
            # grace, the hook's polling), so three restarts need more than 64 MiB or the last
            # one can come after fio's last fsync (no LAYOUTCOMMIT left to wait for). The same
            # for SCSI, whose registrations survive the restart (docs/pnfs.md "After a
            # restart"); SCSI_EXPECT_LAYOUT_AFTER_CRASH=0 lets its runs fall back to the MDS.
            CRASH_COMMIT_WAIT=120 \
            VM_HOST_HOOK="$HERE/restart-hook.sh $(printf '%q' "$CRASH_CMD $(printf '%q' "$sigs")")" \
                run "${CRASH_NAME:-crash}-$cl-$v" "$HERE/scenarios/crash-write.sh" "$v" LAYOUT="$cl" \
                SCENARIO="${CRASH_NAME:-crash}-$cl-v$v" RESTARTS="$n" CRASH_SIGNALS="${sigs// //}" \
                SCSI_EXPECT_LAYOUT_AFTER_CRASH="${SCSI_EXPECT_LAYOUT_AFTER_CRASH:-1}" \
                FIO_SIZE="${CRASH_FIO_SIZE:-$((32 + 32 * n))m}" ${CRASH_EXTRA_ENV:-}
        done
    done
fi

# admin-guide.sh: the client commands of docs/admin-guide.md, from its text (block layout)
if [[ ${GUIDE:-0} == 1 ]]; then
    [[ -z ${SWITCH_LAYOUT_CMD:-} ]] || bash -c "$SWITCH_LAYOUT_CMD block" >&2 || rc=1
    VM_FILES="$HERE/../../docs/admin-guide.md" run admin-guide "$HERE/scenarios/admin-guide.sh" 4.2
fi

# deleg-metadata.sh: the metadata workload with delegations off and on, last
# (it leaves the server's delegations on). META_CMD `<command> i` restarts the server with
# read and write delegations off for odd i, on for even i (test-pnfsd-suite.sh `ctl delegs`).
if [[ -n ${META_CMD:-} ]]; then
    ml=${META_LAYOUT:-block}
    [[ -z ${SWITCH_LAYOUT_CMD:-} ]] || bash -c "$SWITCH_LAYOUT_CMD $ml" >&2 || rc=1
    for v in ${META_VERSIONS:-4.2}; do
        VM_TIMEOUT=${META_TIMEOUT:-2400} HOOK_TIMEOUT=${META_TIMEOUT:-2400} \
        VM_HOST_HOOK="$HERE/restart-hook.sh $(printf '%q' "$META_CMD")" \
            run "meta-$ml-$v" "$HERE/scenarios/deleg-metadata.sh" "$v" LAYOUT="$ml" \
            ROUNDS="${META_ROUNDS:-3}" FILES="${META_FILES:-400}"
        grep -hE '^(METASUM .*step=workload|METARATIO)' "$VM_DIR"/runs/*-suite-meta-"$ml-$v"-$$.log | sed "s/^/[meta-$ml-$v] /" >&2
    done
fi

echo
echo "===== Linux client suite (kernel $(basename "$("$HERE/build-guest.sh" 2>/dev/null | tail -n1)")) ====="
printf '%s\n' "${SUMMARY[@]}"
exit "$rc"
