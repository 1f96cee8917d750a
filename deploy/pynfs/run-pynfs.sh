#!/bin/bash
# run-pynfs.sh - run the pynfs NFSv4.1/4.2 server conformance suite against a
# server and summarise the result.
#
# usage: deploy/pynfs/run-pynfs.sh PYNFS_DIR HOST:PORT[/PATH] [MINORVERSION] [TEST...]
#
#   PYNFS_DIR     a BUILT pynfs checkout (`python3 setup.py build` done in it).
#                 pynfs is never part of this repository: fetch and build it
#                 outside (see docs/conformance.md).
#   HOST:PORT     the server; /PATH (default /) is the directory pynfs builds
#                 its test tree in (--maketree), it must be writable.
#   MINORVERSION  1 (default) or 2.
#   TEST...       test codes/flags instead of the default "all".
#
# Environment: PYNFS_OUT (directory for the results; default a new
# /tmp/pynfs-<stamp>), PYNFS_ARGS (extra testserver.py options, e.g.
# "--rundeps" or "--maketree" is always passed).
#
# Output: testserver.py's own report in $PYNFS_OUT/testserver.log, the JSON
# in $PYNFS_OUT/results.json, then a summary parsed from both:
#   PYNFS asked=N of=M skipped=S failed=F warned=W passed=P   (testserver.py's count)
#   PYNFS_JSON tests=M failures=F skipped=S                     (from the JSON)
#   FAIL <code> <name>: <message>                                (one per failure)
# Exit status: 0 if no test failed, 1 if some did, 2 on usage error, 3 if the
# run produced no JSON (server unreachable, tester crashed).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
PYNFS=$(cd "$1" 2>/dev/null && pwd) || { echo "run-pynfs: no directory $1" >&2; exit 2; }
TARGET=$2
MINOR=${3:-1}
shift $(( $# >= 3 ? 3 : 2 ))
TESTS=("$@")
((${#TESTS[@]})) || TESTS=(all)
[[ -f $PYNFS/nfs4.1/testserver.py ]] || { echo "run-pynfs: $PYNFS is not a pynfs checkout" >&2; exit 2; }
[[ -d $PYNFS/nfs4.1/xdrdef && -n $(ls "$PYNFS"/nfs4.1/xdrdef/nfs4_type.py 2>/dev/null) ]] ||
    { echo "run-pynfs: $PYNFS is not built (run 'python3 setup.py build' in it)" >&2; exit 2; }
[[ $MINOR == 1 || $MINOR == 2 ]] || { echo "run-pynfs: minor version must be 1 or 2" >&2; exit 2; }
# testserver.py wants SERVER:/PATH (path may be just /)
[[ $TARGET == */* ]] || TARGET=$TARGET/
OUT=${PYNFS_OUT:-/tmp/pynfs-$(date +%Y%m%d-%H%M%S)-$$}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

echo "[run-pynfs] $TARGET minorversion $MINOR tests: ${TESTS[*]} (results in $OUT)" >&2
t0=$(date +%s)
# testserver.py must run from its own directory (it imports its siblings)
# shellcheck disable=SC2086
(cd "$PYNFS/nfs4.1" && python3 testserver.py --json="$OUT/results.json" \
    --minorversion="$MINOR" --maketree ${PYNFS_ARGS:-} "$TARGET" "${TESTS[@]}") \
    > "$OUT/testserver.log" 2>&1
trc=$?
echo "[run-pynfs] testserver.py exit $trc after $(( $(date +%s) - t0 )) s" >&2

if [[ ! -s $OUT/results.json ]]; then
    echo "[run-pynfs] no JSON produced; tail of testserver.log:" >&2
    tail -n 25 "$OUT/testserver.log" >&2
    exit 3
fi

python3 - "$OUT/results.json" "$OUT/testserver.log" <<'PY'
import json, re, sys
data = json.load(open(sys.argv[1]))
log = open(sys.argv[2], errors="replace").read()
# testserver.py's own tally distinguishes skipped / warned, which the JSON
# folds into "skipped" (also counting tests not selected) and "passed".
asked = re.search(r"(?:Command line asked for|Only) (\d+)(?: of (\d+))? tests", log)
tally = re.search(r"Of those: (\d+) Skipped, (\d+) Failed, (\d+) Warned, (\d+) Passed", log)
if asked and tally:
    s, f, w, p = map(int, tally.groups())
    print("PYNFS asked=%s of=%s skipped=%d failed=%d warned=%d passed=%d pass_or_warn=%d"
          % (asked.group(1), asked.group(2) or "?", s, f, w, p, p + w))
print("PYNFS_JSON tests=%d failures=%d skipped=%d"
      % (data.get("tests", 0), data.get("failures", 0), data.get("skipped", 0)))
for t in sorted(data.get("testcase", []), key=lambda t: t.get("code", "")):
    if "failure" in t:
        msg = " ".join(str(t["failure"].get("message", "")).split())[:160]
        print("FAIL %s %s: %s" % (t.get("code"), t.get("name"), msg))
sys.exit(1 if data.get("failures", 0) else 0)
PY
