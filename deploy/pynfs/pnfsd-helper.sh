#!/bin/bash
# pnfsd-helper.sh - pynfs's --serverhelper for pnfsd: the reboot tests (REBT*) ask it to
# "reboot" the server, which it does the hard way: SIGKILL, then the same command again on
# the same data directory (nothing unmounted, so the restart recovers the log and starts a
# grace period from the client records).
#
# usage: deploy/pynfs/pnfsd-helper.sh STATEDIR start PNFSD_ARGS...   start pnfsd, remember how
#        deploy/pynfs/pnfsd-helper.sh STATEDIR reboot                  SIGKILL it, start it again
#        deploy/pynfs/pnfsd-helper.sh STATEDIR stop                    SIGKILL it
#
#   STATEDIR  a directory of the helper's own: `cmd` (the command line), `pid`, `pnfsd.log`.
#
# With pynfs (its testserver.py passes the action as the last argument):
#   deploy/pynfs/pnfsd-helper.sh /tmp/h start target/release/pnfsd serve --data-dir D \
#       --listen 127.0.0.1:12049 --nvme-listen 127.0.0.1:14420 --lease-seconds 15
#   PYNFS_ARGS="--serverhelper=$PWD/deploy/pynfs/pnfsd-helper.sh --serverhelperarg=/tmp/h" \
#       deploy/pynfs/run-pynfs.sh /work/pynfs 127.0.0.1:12049/dir 1 reboot
# At the default lease (90 s) add `--config F` with `idle_timeout_seconds = 300` in F: REBT5
# sleeps 85 s on a connection with no session, and pynfs's polling thread dies when the
# server closes it at the default 60 s (docs/conformance.md).
set -uo pipefail

[[ $# -ge 2 ]] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
DIR=$1
ACTION=$2
shift 2
mkdir -p "$DIR"

launch() {
    # The command line is kept NUL-separated, so arguments with spaces survive.
    mapfile -d '' -t cmd < "$DIR/cmd"
    setsid "${cmd[@]}" >> "$DIR/pnfsd.log" 2>&1 < /dev/null &
    echo $! > "$DIR/pid"
    # Ready when the log says so (the "ready" line), or give up after 30 s.
    for _ in $(seq 300); do
        if grep -q "pnfsd ready:" "$DIR/pnfsd.log" 2>/dev/null &&
            [[ $(grep -c "pnfsd ready:" "$DIR/pnfsd.log") -ge $(cat "$DIR/starts") ]]; then
            return 0
        fi
        kill -0 "$(cat "$DIR/pid")" 2>/dev/null || { echo "pnfsd-helper: pnfsd exited" >&2; return 1; }
        sleep 0.1
    done
    echo "pnfsd-helper: pnfsd not ready after 30 s" >&2
    return 1
}

kill_it() {
    [[ -f $DIR/pid ]] || return 0
    local pid
    pid=$(cat "$DIR/pid")
    kill -KILL "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$DIR/pid"
}

case $ACTION in
start)
    [[ $# -ge 1 ]] || { echo "pnfsd-helper: start needs the pnfsd command" >&2; exit 2; }
    printf '%s\0' "$@" > "$DIR/cmd"
    echo 1 > "$DIR/starts"
    launch
    ;;
reboot)
    [[ -f $DIR/cmd ]] || { echo "pnfsd-helper: nothing started in $DIR" >&2; exit 2; }
    kill_it
    echo $(( $(cat "$DIR/starts") + 1 )) > "$DIR/starts"
    launch
    ;;
stop)
    kill_it
    ;;
*)
    echo "pnfsd-helper: unknown action $ACTION" >&2
    exit 2
    ;;
esac
