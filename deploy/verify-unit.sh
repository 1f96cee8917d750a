#!/bin/bash
# verify-unit.sh - checks deploy/pnfsd.service and deploy/pnfsd-target.service as systemd
# reads them:
# `systemd-analyze verify` must accept each without a single complaint (it only warns about
# a misspelt key or value, so any output fails), with the man pages its Documentation=
# names generated from the binary (`pnfsd man --dir`), and the ExecStart binary pointed
# at PNFSD_BIN; then prints the sandbox's exposure score (`systemd-analyze security`).
#
# usage: deploy/verify-unit.sh [PNFSD_BIN]   (default target/release/pnfsd)
# Needs systemd-analyze (Debian package systemd; .ci/run installs it). No running systemd.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-$HERE/../target/release/pnfsd}")
[[ -x $BIN ]] || { echo "verify-unit: no pnfsd binary at $BIN" >&2; exit 2; }
command -v systemd-analyze >/dev/null || { echo "verify-unit: systemd-analyze not installed (apt-get install systemd)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/man/man1"
"$BIN" man --dir "$T/man/man1"
# unit, the command line its ExecStart must have
check() {
    local unit=$1 args=$2 rc=0 out
    sed "s#^ExecStart=/usr/local/bin/pnfsd #ExecStart=$BIN #" "$HERE/$unit" > "$T/$unit"
    grep -q "^ExecStart=$BIN $args$" "$T/$unit" ||
        { echo "verify-unit: $unit: ExecStart is not /usr/local/bin/pnfsd $args" >&2; exit 1; }
    out=$(MANPATH=$T/man SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$T/$unit" 2>&1) || rc=$?
    if ((rc != 0)) || [[ -n $out ]]; then
        echo "$out" >&2
        echo "verify-unit: $unit: FAIL (systemd-analyze verify exit $rc)" >&2
        exit 1
    fi
    grep -q '^Type=notify$' "$T/$unit" || { echo "verify-unit: $unit: FAIL (not Type=notify)" >&2; exit 1; }
    echo "verify-unit: $unit: systemd-analyze verify: no complaint ($(systemd-analyze --version | head -n1))"
    systemd-analyze security --offline=true "$T/$unit" 2>&1 | grep -E 'Overall exposure' || true
}
check pnfsd.service "serve --config /etc/pnfsd/pnfsd.toml"
check pnfsd-target.service "target --config /etc/pnfsd/pnfsd-target.toml"
