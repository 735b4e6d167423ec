# shellcheck shell=bash disable=SC2034,SC2154
# step: determinism --on-device (runs compared on the GPU): its GPU tests, fixed and reduction=atomic on a real-width model with 16 experts, bench_hip's overhead line
#
# The kernel and snapshot tests, then determinism on bench/v4-widths-small-experts.json (CSA and
# HCA layers at real widths, 16 experts, 0.7 GB) with ONDEV_LEN (1024) tokens: fixed
# bit-identical and reduction=atomic caught; then bench_hip's overhead line against the
# untapped forward (target <= 1.10x).
expect on-device-tests 0 tdiff_gpu_tests --gtest_filter='RunCompare.*:Model.DeterminismComparedOnTheDevice'
model="$WORK/widths16$sfx" case="$WORK/widths16$sfx.h5"
if [ ! -f "$case" ]; then
  rm -rf "$model"
  tdiff synth --config bench/v4-widths-small-experts.json --seed 1 -o "$model" >"$OUT/on-device-synth.log" 2>&1 &&
    tdiff case new --model "$model" --random-prompts 1 --len "${ONDEV_LEN:-1024}" --seed 1 -o "$case" \
      >>"$OUT/on-device-synth.log" 2>&1 || { note "FAIL on-device: building the model and case"; failed=1; return; }
fi
expect on-device-fixed 0 timeout "$(left)" tdiff determinism "$case" --backend hip --policy fixed --runs 3 --on-device \
  --no-reports
expect on-device-atomic 1 timeout "$(left)" tdiff determinism "$case" --backend hip --policy fixed --set reduction=atomic \
  --runs 3 --on-device --no-reports
note "on-device-atomic: $(grep -E '^verdict' "$OUT/on-device-atomic.log")"
expect on-device-bench 0 timeout "$(left)" bench_hip "$case" --runs 3 -o "$OUT/bench_hip_on_device.json"
note "on-device-bench: $(grep -E '^(prefill, no stage|compared on the device)' "$OUT/on-device-bench.log" | tr '\n' '|')"
