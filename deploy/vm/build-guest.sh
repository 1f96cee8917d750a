#!/bin/bash
# build-guest.sh - build (or reuse) the Linux-client test guest of pnfsd.
#
# usage: [KVER=6.12|6.1|<abi, e.g. 6.1.0-57-amd64>] [PNFSD_VM_DIR=/var/tmp/pnfsd-vm]
#        deploy/vm/build-guest.sh
#
# Everything comes from Debian packages: the root filesystem from debootstrap
# (bookworm, minbase), the kernel and its modules from the linux-image package
# (downloaded with `apt-get download`, never installed on the host).
#
# Output, keyed by the kernel's ABI name (run-guest.sh finds it the same way):
#   $PNFSD_VM_DIR/<abi>/vmlinux      the uncompressed ELF kernel (booted via PVH)
#   $PNFSD_VM_DIR/<abi>/vmlinuz      the packaged bzImage (fallback)
#   $PNFSD_VM_DIR/<abi>/guest.cpio   the whole guest root as ONE uncompressed initramfs
#   $PNFSD_VM_DIR/<abi>/.built       stamp: inputs' hash; unchanged inputs = nothing to do
# Shared between kernels: $PNFSD_VM_DIR/rootfs-<suite> (debootstrap result),
# $PNFSD_VM_DIR/apt-cache (.deb cache), $PNFSD_VM_DIR/kernel/<abi> (unpacked package).
#
# Why these choices (measured under TCG on a 2-core host, see docs/testing-vm.md):
# - initramfs as the whole root: no root disk, so the guest sees only the
#   devices a scenario attaches (the NVMe/TCP namespace is nvme0n1);
# - uncompressed cpio: the kernel unpacks a plain cpio faster than zstd/xz;
# - ELF vmlinux via PVH: skips ~6 s of in-guest kernel decompression;
# - modules decompressed at build time and depmod'ed here: no in-guest xz work.
#
# Idempotent: a second run with the same inputs prints "up to date" and exits.
# FORCE=1 re-stages and re-packs; FORCE_DEBOOTSTRAP=1 also redoes debootstrap.
set -euo pipefail

VM_DIR=${PNFSD_VM_DIR:-/var/tmp/pnfsd-vm}
KVER=${KVER:-6.12}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
HERE=$(cd "$(dirname "$0")" && pwd)

# Guest packages. nfs-common: mount.nfs, blkmapd (links libdevmapper);
# nvme-cli: nvme connect/discover; fio: the overwrite job; busybox: small
# extras (wget, hexdump); python3: scenario helpers (O_DIRECT I/O with aligned
# buffers); dmsetup + strace: debugging what blkmapd built.
# nfs-kernel-server + xfsprogs: only for the knfsd stand-in server
# (scenarios/knfsd-server.sh), which proves the client scenarios against a
# real pNFS block-layout server; the client boot never starts them.
PKGS=${GUEST_PKGS:-nfs-common,nvme-cli,fio,kmod,iproute2,procps,util-linux,busybox,python3,dmsetup,strace,coreutils,nfs-kernel-server,xfsprogs}

# Modules put into the guest (plus everything they depend on).
# virtio_*/9p*: console-less boot with net + the host share; sunrpc..nfsv4:
# the NFSv4.1/4.2 client; blocklayoutdriver: pNFS block AND SCSI layouts
# (one module, layout types 3 and 5); dm_mod: blkmapd builds dm tables;
# nvme_tcp/nvme_fabrics: the data path to pnfsd's embedded target.
# nfsd, xfs, nvmet, nvmet_tcp, nvme_loop, brd: the knfsd stand-in server
# (loaded on demand; nvme_loop exists in 6.12 only).
MODULES=${GUEST_MODULES:-"virtio_pci virtio_net virtio_blk virtio_scsi sd_mod 9pnet_virtio 9p
 sunrpc auth_rpcgss nfs nfsv4 blocklayoutdriver nfs_layout_nfsv41_files nfs_layout_flexfiles
 dm_mod loop nvme nvme_core nvme_fabrics nvme_tcp configfs crc32c_generic crc32c_intel
 nfsd xfs nvmet nvmet_tcp nvme_loop brd"}

log() { echo "[build-guest $(date +%T)] $*" >&2; }
T0=$(date +%s)
# one build at a time (run-guest.sh calls this; guests may start in parallel)
mkdir -p "$VM_DIR"
exec 9> "$VM_DIR/.build.lock"
flock 9

# ---- host tools ------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v cpio >/dev/null || need+=(cpio)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v depmod >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
if ((${#need[@]})); then
    log "installing host packages: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# ---- which kernel ----------------------------------------------------------
# KVER=6.12 -> metapackage linux-image-6.12-amd64 (bookworm-security);
# KVER=6.1  -> linux-image-amd64 (bookworm's default);
# anything else is taken as the ABI name (linux-image-<abi>).
resolve_abi() {
    local meta
    case $1 in
        [0-9]*.[0-9]*-*) echo "$1"; return ;;
        6.1) meta=linux-image-amd64 ;;
        *) meta=linux-image-$1-amd64 ;;
    esac
    apt-cache depends "$meta" 2>/dev/null |
        awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ { sub("linux-image-", "", $2); print $2; exit }'
}
ABI=$(resolve_abi "$KVER")
if [[ -z $ABI ]]; then
    apt-get update -qq
    ABI=$(resolve_abi "$KVER")
fi
[[ -n $ABI ]] || { log "cannot resolve a linux-image package for KVER=$KVER"; exit 2; }
OUT=$VM_DIR/$ABI
mkdir -p "$OUT" "$VM_DIR/apt-cache"

# ---- up to date? -------------------------------------------------------------
# The stamp is a hash of every input that ends up in the image.
inputs_hash() {
    { echo "$SUITE $MIRROR $PKGS $MODULES $ABI"; cat "$HERE/guest-init" "$0"; } | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
if [[ -z ${FORCE:-}${FORCE_DEBOOTSTRAP:-} && -s $OUT/guest.cpio && -s $OUT/vmlinuz &&
      $(cat "$OUT/.built" 2>/dev/null) == "$HASH" ]]; then
    log "up to date: $OUT (kernel $ABI)"
    echo "$OUT"
    exit 0
fi

# ---- kernel package: download + unpack once ----------------------------------
KROOT=$VM_DIR/kernel/$ABI
if [[ ! -e $KROOT/.unpacked ]]; then
    log "downloading linux-image-$ABI"
    t=$(date +%s)
    rm -rf "$KROOT"; mkdir -p "$KROOT"
    deb=$(ls "$VM_DIR/apt-cache/linux-image-${ABI}_"*.deb 2>/dev/null | head -n1 || true)
    if [[ -z $deb ]]; then
        (cd "$VM_DIR/apt-cache" && apt-get download -q -o APT::Sandbox::User=root "linux-image-$ABI" >/dev/null)
        deb=$(ls "$VM_DIR/apt-cache/linux-image-${ABI}_"*.deb | head -n1)
    fi
    dpkg-deb -x "$deb" "$KROOT"
    # Debian kernels >= 6.x may ship modules as .ko.xz: decompress here once,
    # so neither the host's modprobe nor the guest spends time on it.
    find "$KROOT/lib/modules/$ABI" -name '*.ko.xz' -exec xz -d {} +
    find "$KROOT/lib/modules/$ABI" -name '*.ko.zst' -exec zstd -q -d --rm {} +
    depmod -b "$KROOT" "$ABI"
    touch "$KROOT/.unpacked"
    log "kernel unpacked in $(( $(date +%s) - t )) s"
fi
install -m 0644 "$KROOT/boot/vmlinuz-$ABI" "$OUT/vmlinuz"
# The ELF vmlinux inside the bzImage (Debian: xz for 6.1, zstd for 6.12).
# QEMU boots it via PVH (CONFIG_PVH=y), avoiding the decompression under TCG.
rm -f "$OUT/vmlinux"
python3 - "$OUT/vmlinuz" "$OUT/vmlinux" <<'PY' || log "no ELF vmlinux; run-guest.sh will boot the bzImage"
import lzma, struct, subprocess, sys
data = open(sys.argv[1], 'rb').read()
elf = b''
xz, zst = data.find(b'\xfd7zXZ\x00'), data.find(b'\x28\xb5\x2f\xfd')
if xz >= 0:
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[xz:])
elif zst >= 0:
    # zstd stops with an error at the bytes after the frame; the output is whole
    elf = subprocess.run(['zstd', '-dc'], input=data[zst:], capture_output=True).stdout
if elf[:4] != b'\x7fELF':
    sys.exit("no xz/zstd ELF payload in " + sys.argv[1])
shoff, = struct.unpack_from('<Q', elf, 0x28)
shentsize, shnum = struct.unpack_from('<HH', elf, 0x3a)
if shoff + shentsize * shnum > len(elf):
    sys.exit("truncated ELF payload in " + sys.argv[1])
open(sys.argv[2], 'wb').write(elf)
PY

# ---- base root filesystem (debootstrap, once per suite + package list) -------
ROOTFS=$VM_DIR/rootfs-$SUITE
PKGHASH=$(echo "$PKGS $MIRROR" | sha256sum | cut -c1-16)
if [[ -n ${FORCE_DEBOOTSTRAP:-} || $(cat "$ROOTFS/.pnfsd-debootstrap" 2>/dev/null) != "$PKGHASH" ]]; then
    rm -rf "$ROOTFS"
    log "debootstrap $SUITE minbase + $PKGS"
    t=$(date +%s)
    debootstrap --variant=minbase --cache-dir="$VM_DIR/apt-cache" --include="$PKGS" \
        "$SUITE" "$ROOTFS" "$MIRROR" > "$VM_DIR/debootstrap.log" 2>&1 ||
        { tail -n 20 "$VM_DIR/debootstrap.log" >&2; exit 1; }
    echo "$PKGHASH" > "$ROOTFS/.pnfsd-debootstrap"
    log "debootstrap took $(( $(date +%s) - t )) s"
fi

# ---- stage: trimmed copy + modules + our init --------------------------------
log "staging"
STAGE=$OUT/stage
rm -rf "$STAGE"
cp -a "$ROOTFS" "$STAGE"
rm -rf "$STAGE"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion} \
       "$STAGE"/var/cache/apt/* "$STAGE"/var/lib/apt/lists/* "$STAGE"/var/log/* \
       "$STAGE"/.pnfsd-debootstrap
MODDIR=$KROOT/lib/modules/$ABI
mkdir -p "$STAGE/lib/modules/$ABI"
cp "$MODDIR"/modules.{order,builtin,builtin.modinfo} "$STAGE/lib/modules/$ABI/"
missing=""
: > "$OUT/modules.list"
for m in $MODULES; do
    # modules built into this kernel print "builtin"; unknown ones fail
    modprobe -d "$KROOT" -S "$ABI" --show-depends "$m" >> "$OUT/modules.list" 2>/dev/null ||
        missing+=" $m"
done
awk '$1=="insmod" {print $2}' "$OUT/modules.list" | sort -u | while read -r ko; do
    rel=${ko#"$KROOT"/}
    mkdir -p "$STAGE/$(dirname "$rel")"
    cp "$ko" "$STAGE/$rel"
done
[[ -z $missing ]] || log "WARNING: modules not found in $ABI:$missing"
depmod -b "$STAGE" "$ABI"
log "modules: $(find "$STAGE/lib/modules/$ABI" -name '*.ko' | wc -l) files"

install -m 0755 "$HERE/guest-init" "$STAGE/init"
echo pnfsd-guest > "$STAGE/etc/hostname"
: > "$STAGE/etc/resolv.conf"               # no DNS: the guest must not reach out
printf '127.0.0.1\tlocalhost\n127.0.1.1\tpnfsd-guest\n' > "$STAGE/etc/hosts"
mkdir -p "$STAGE"/{host,mnt,run/rpc_pipefs,var/lib/nfs/rpc_pipefs,dev/disk/by-id}
echo "$ABI" > "$STAGE/etc/pnfsd-guest-kernel"

# ---- pack ------------------------------------------------------------------------
log "packing initramfs"
(cd "$STAGE" && find . -print0 | cpio --null -o -H newc --quiet) > "$OUT/guest.cpio.tmp"
mv "$OUT/guest.cpio.tmp" "$OUT/guest.cpio"
log "stage $(du -sh "$STAGE" | cut -f1), initramfs $(du -h "$OUT/guest.cpio" | cut -f1)"
rm -rf "$STAGE"
echo "$HASH" > "$OUT/.built"
log "built $OUT (kernel $ABI) in $(( $(date +%s) - T0 )) s"
echo "$OUT"
