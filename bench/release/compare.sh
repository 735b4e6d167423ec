#!/usr/bin/env bash
# Two tdiff binaries side by side on what a release-format model costs before the first
# forward: `tdiff synth --format release` (draw, quantise to FP8/FP4, write the shards) and
# `tdiff case new` on the folder (hash every shard, read every weight once for NaN/Inf).
# Runs alternate between the binaries, so a busy machine slows both alike; prints each one's
# median wall time and the ratio.
#
#   bench/release/compare.sh BASE_TDIFF NEW_TDIFF [RUNS] [SYNTH ARGS ...]
#
# Default model: bench/v4-widths-small-experts.json (2 layers at V4-Flash's widths, CSA and
# HCA, 256 small experts; 0.37 GB of shards), 3 runs. On the device host:
#   bench/release/compare.sh base/tdiff build/tdiff 3 --preset v4-flash-dims --layers 0-3
# bench/release/fp4-heavy.json: the same widths with 16 experts of the real 2048 width (FP4 the
# bulk of the shards, as in the release).
# WORK (default a temporary folder) holds the models; they are deleted at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
base="$1" new="$2" runs="${3:-3}"
shift $(( $# >= 3 ? 3 : 2 ))
synth_args=("$@")
[ ${#synth_args[@]} -gt 0 ] || synth_args=(--config "$here/../v4-widths-small-experts.json")
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: RUNS must be a positive number, not '$runs'" >&2; exit 2; }
for b in "$base" "$new"; do [ -x "$b" ] || { echo "compare.sh: $b is not an executable" >&2; exit 2; }; done
if [ -n "${WORK:-}" ]; then
  work="$WORK"
  mkdir -p "$work"
  trap 'rm -rf "$work"/model-* "$work"/case-*' EXIT
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi

now() { date +%s.%N; }
declare -A t
for ((r = 1; r <= runs; ++r)); do
  for who in base new; do
    bin=$base; [ $who = new ] && bin=$new
    rm -rf "$work/model-$who" "$work/case-$who.h5"
    t0=$(now)
    "$bin" synth "${synth_args[@]}" --format release --seed 1 -o "$work/model-$who" >/dev/null
    t1=$(now)
    "$bin" case new --model "$work/model-$who" --random-prompts 1 --len 64 --seed 1 -o "$work/case-$who.h5" >/dev/null
    t2=$(now)
    t[synth-$who]+="$(echo "$t1 - $t0" | bc) "
    t[case-$who]+="$(echo "$t2 - $t1" | bc) "
  done
  cmp -s <(cd "$work/model-base" && sha256sum -- *) <(cd "$work/model-new" && sha256sum -- *) ||
    { echo "compare.sh: the two binaries wrote different models" >&2; exit 1; }
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "model: ${synth_args[*]} ($(du -sh "$work/model-new" | cut -f1) of shards), $runs runs each, alternating, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all $(nproc)}"
for step in synth case; do
  b=$(echo "${t[$step-base]}" | median) n=$(echo "${t[$step-new]}" | median)
  printf '%-6s base %8.2f s   new %8.2f s   new/base %.3f   (runs: base %s| new %s)\n' "$step" "$b" "$n" \
    "$(echo "$n / $b" | bc -l)" "${t[$step-base]}" "${t[$step-new]}"
done
