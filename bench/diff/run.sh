#!/usr/bin/env bash
# The diff benchmark: tdiff's metrics vs this machine's streaming-read bandwidth (target
# >= 70%) and vs numpy computing the same metrics (target >= 5x), on the same data.
#   bench/diff/run.sh [BUILD_DIR] [--gib N]      (BUILD_DIR defaults to ./build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then BUILD=$1; shift; fi
BIN="$BUILD/bench/diff/bench_diff"
[ -x "$BIN" ] || { echo "run.sh: $BIN not built (cmake --build $BUILD --target bench_diff)" >&2; exit 2; }
# Debian's python3-numpy lives with /usr/bin/python3; a python3 earlier in PATH may lack it.
PY=${PYTHON:-python3}
"$PY" -c 'import numpy' 2>/dev/null || PY=/usr/bin/python3

tdiff_out=$("$BIN" "$@")
echo "$tdiff_out" | grep -v '^RESULT'
numpy_out=$("$PY" bench/diff/numpy_metrics.py "$@")
echo "$numpy_out" | grep -v '^RESULT'

value() { echo "$1" | grep '^RESULT' | tr ' ' '\n' | sed -n "s/^$2=//p"; }
stream=$(value "$tdiff_out" stream_gbps)
ours=$(value "$tdiff_out" metrics_gbps)
numpy=$(value "$numpy_out" numpy_gbps)
scaled=$(value "$tdiff_out" metrics_scaled_gbps)
awk -v s="$stream" -v t="$ours" -v n="$numpy" -v x="$scaled" 'BEGIN {
  printf "tdiff / stream read  %5.0f%%   (target >= 70%%)\n", 100 * t / s
  printf "tdiff / stream read  %5.0f%%   where rms(r) > 1 (two passes)\n", 100 * x / s
  printf "tdiff / numpy        %5.1fx   (target >= 5x)\n", t / n }'
# Both computed the same numbers on the same data.
tv=$(echo "$tdiff_out" | sed -n 's/^values //p'); nv=$(echo "$numpy_out" | sed -n 's/^values //p')
"$PY" - "$tv" "$nv" <<'EOF'
import sys
a = dict(kv.split("=") for kv in sys.argv[1].split())
b = dict(kv.split("=") for kv in sys.argv[2].split())
bad = [k for k in a if abs(float(a[k]) - float(b[k])) > 1e-9 * max(1e-300, abs(float(b[k])))]
print("values agree with numpy" if not bad else "VALUES DIFFER: " + ", ".join(bad))
sys.exit(1 if bad else 0)
EOF
