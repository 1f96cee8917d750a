#!/bin/bash
# admin-guide.sh - runs the "Client" section of docs/admin-guide.md from the guide's own
# text, so the guide cannot go stale.
#
# The guide must be in the run directory (client-suite.sh: VM_FILES=docs/admin-guide.md).
# Its ```sh client-env block sets SERVER, NQN, NFS_PORT, NVME_PORT for a reader's site;
# a value given to the guest (run-guest.sh -e, from client-suite.sh) wins, the guide's
# value is kept for anything not given. Then every ```sh client block runs, in order, as
# its own `bash -euo pipefail` script with those variables exported; each must exit 0.
# Before the block that unmounts (the first one with `umount`), this scenario checks that
# the guide's mount used the layout (LAYOUTGET, GETDEVICEINFO, LAYOUTCOMMIT > 0, the
# guide's 8 MiB not sent as NFS WRITE) and leaves a file for the host's byte check, which
# its close must have LAYOUTCOMMITted.
# Env: EXPECT_PNFS=1|0 (1) as in block-layout.sh.
SCENARIO=${SCENARIO:-admin-guide}
# shellcheck source=SCRIPTDIR/lib.sh
. /host/lib/lib.sh
GUIDE=/host/admin-guide.md
OUT=/host/out
MNT=/mnt/pnfs
EXPECT_PNFS=${EXPECT_PNFS:-1}
[[ -r $GUIDE ]] || die "no $GUIDE (run with VM_FILES=docs/admin-guide.md)"

# blocks TAG: writes each block tagged TAG to $OUT/guide-TAG-N.sh, prints the count
blocks() {
    awk -v tag="$1" -v out="$OUT/guide-$1-" '
        $0 == "```sh " tag { n++; f = out n ".sh"; printf "" > f; inb = 1; next }
        inb && /^```/ { inb = 0; close(f); next }
        inb { print >> f }
        END { print n + 0 }' "$GUIDE"
}

nenv=$(blocks client-env)
((nenv == 1)) || die "the guide has $nenv client-env blocks (want 1)"
while IFS= read -r line; do
    [[ $line =~ ^([A-Z_]+)=(.*)$ ]] || continue
    k=${BASH_REMATCH[1]} v=${BASH_REMATCH[2]}
    if [[ -n ${!k:-} ]]; then
        echo "ENV $k=${!k} (given; the guide says $v)"
    else
        printf -v "$k" '%s' "$v"
        echo "ENV $k=$v (from the guide)"
    fi
    export "${k?}"
done < "$OUT/guide-client-env-1.sh"
: "${SERVER:?}" "${NQN:?}" "${NFS_PORT:?}" "${NVME_PORT:?}"

n=$(blocks client)
((n > 0)) || die "no \`\`\`sh client blocks in the guide"
echo "CONFIG scenario=$SCENARIO kernel=$(uname -r) blocks=$n server=$SERVER nqn=$NQN nfs_port=$NFS_PORT nvme_port=$NVME_PORT"

pnfs_checks() {
    counts "$MNT" guide
    local lt lg gdi lc wb
    lt=$(layout_type "$MNT") lg=$(opcount "$MNT" LAYOUTGET) gdi=$(opcount "$MNT" GETDEVICEINFO)
    lc=$(opcount "$MNT" LAYOUTCOMMIT) wb=$(opcount "$MNT" WRITE 3)
    [[ $lt == LAYOUT_BLOCK_VOLUME || $lt == LAYOUT_SCSI ]]; check layout-type $? "pnfs=$lt"
    ((lg > 0)); check layoutget $? "LAYOUTGET=$lg"
    ((gdi > 0)); check getdeviceinfo $? "GETDEVICEINFO=$gdi"
    ((lc > 0)); check layoutcommit $? "LAYOUTCOMMIT=$lc"
    ((wb < 1048576)); check no-bulk-nfs-write $? "NFS WRITE bytes $wb for the guide's 8 MiB"
}

checked=0
for ((i = 1; i <= n; i++)); do
    b=$OUT/guide-client-$i.sh
    if ((!checked)) && grep -qw umount "$b"; then
        checked=1
        if [[ $EXPECT_PNFS == 1 ]]; then pnfs_checks
        else pnfs_checks | sed 's/^CHECK \([^ ]*\) \(ok\|FAIL\)/NOTE \1 \2/'; fi
        # a file of our own for the host's byte check (client-suite.sh CAT_CMD). Its close(2)
        # must have written and LAYOUTCOMMITted it before `cp` returns: pnfsd's write
        # delegations promise no space (space_limit 0), so the client flushes at CLOSE and
        # nothing is left pending for sync or umount, which can drop it (docs/delegations.md
        # "Space limit").
        head -c 4M /dev/urandom > /tmp/guide.bin
        lc0=$(opcount "$MNT" LAYOUTCOMMIT)
        cp /tmp/guide.bin "$MNT/admin-guide-check.bin"
        lc1=$(opcount "$MNT" LAYOUTCOMMIT)
        if [[ $EXPECT_PNFS == 1 ]]; then
            ((lc1 > lc0)); check commit-at-close $? "LAYOUTCOMMIT $lc0 -> $lc1 across cp's close"
        fi
        sync
        printf '%s  %s\n' "$(sha256sum < /tmp/guide.bin | cut -d' ' -f1)" admin-guide-check.bin > "$OUT/checksums.txt"
    fi
    # The guide ends with `nvme disconnect`: lib.sh nvme_teardown_mark.
    grep -q 'nvme disconnect' "$b" && nvme_teardown_mark
    step "guide block $i/$n: $(head -n1 "$b")"
    sed 's/^/GUIDE> /' "$b"
    bash -euo pipefail "$b"
    check "guide-block-$i" $? "$(head -n1 "$b")"
done
((checked)); check guide-unmounts $? "a block with umount ends the client section"
dmesg_check
if ((FAILED)); then echo "RESULT FAIL $SCENARIO"; exit 1; fi
echo "RESULT PASS $SCENARIO"
