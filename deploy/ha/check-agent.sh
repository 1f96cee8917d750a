#!/usr/bin/env bash
# Checks the OCF agent deploy/ha/pnfsd with ocf-tester (Debian package resource-agents):
# meta-data, validate-all, start/monitor/stop cycles of a real pnfsd on a volume file in a
# temp dir; then what ocf-tester does not cover: a missing config is OCF_ERR_CONFIGURED, a
# killed pnfsd monitors as OCF_NOT_RUNNING, a start that pnfsd refuses is OCF_ERR_GENERIC with
# pnfsd's reason.
#   usage: deploy/ha/check-agent.sh PNFSD-BINARY
set -euo pipefail
bin=$(readlink -f "${1:?usage: $0 PNFSD-BINARY}")
agent=$(readlink -f "$(dirname "$0")/pnfsd")
command -v ocf-tester >/dev/null || { echo "ocf-tester not installed (resource-agents)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill -9 $(cat "$dir/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/pnfsd.toml" <<CONF
data_dir = "$dir/data"
volume_size = "64M"
listen = "127.0.0.1:$port"
nvme_listen = "off"
CONF
opts=(-o "binary=$bin" -o "config=$dir/pnfsd.toml" -o "pidfile=$dir/pid" -o "logfile=$dir/log")
ocf-tester -n pnfsd "${opts[@]}" "$agent"

export OCF_ROOT=/usr/lib/ocf OCF_RESOURCE_INSTANCE=pnfsd
export OCF_RESKEY_binary=$bin OCF_RESKEY_pidfile=$dir/pid OCF_RESKEY_logfile=$dir/log
expect() { # expect CODE ACTION
    local rc=0
    "$agent" "$2" >/dev/null 2>&1 || rc=$?
    if [[ $rc != "$1" ]]; then
        echo "[ha] $2 returned $rc, expected $1" >&2
        tail -n 20 "$dir/log" >&2 || true
        exit 1
    fi
}
OCF_RESKEY_config=$dir/missing.toml expect 6 validate-all
export OCF_RESKEY_config=$dir/pnfsd.toml
expect 0 start
kill -9 "$(cat "$dir/pid")"
sleep 0.5
expect 7 monitor
# pnfsd refuses the start (a bad key): the agent says so, with pnfsd's reason.
echo 'reservation_key = "nope"' >>"$dir/pnfsd.toml"
expect 1 start
grep -q "reservation_key" "$dir/log" || { echo "[ha] the refusal's reason is not logged" >&2; exit 1; }
expect 7 monitor
echo "[ha] OCF agent: ocf-tester passed; validate/monitor/start-failure codes as the OCF spec says"
