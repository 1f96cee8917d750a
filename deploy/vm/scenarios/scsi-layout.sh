#!/bin/bash
# scsi-layout.sh - block-layout.sh with pnfsd offering the SCSI layout
# (type 5, RFC 8154) over its NVMe/TCP namespace. Needs the 6.12 kernel
# (KVER=6.12, the default): the Linux SCSI-layout client finds the volume by
# opening /dev/disk/by-id/nvme-eui.<EUI-64 or NGUID>, which block-layout.sh
# creates from sysfs since the guest has no udev. Same env as block-layout.sh.
export LAYOUT=scsi
exec bash /host/lib/block-layout.sh
