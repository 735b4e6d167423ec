# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff audit on the trained small preset (2 x 64 tokens): emu, hip (matrix cores, with full runs) and hip --hip-gemm vector (local factors only)
#
# The local factors of every knob with hip's kernels, both GEMM paths, beside emu's audit of
# the same case; the case (in $WORK/audit) is also hf-client's.
mkdir -p "$WORK/audit"
if [ ! -f "$WORK/audit/small.h5" ]; then
  tdiff synth --preset small --profile trained --seed 1 -o "$WORK/audit/small" >/dev/null &&
    tdiff case new --model "$WORK/audit/small" --random-prompts 2 --len 64 --seed 1 -o "$WORK/audit/small.h5" >/dev/null &&
    tdiff golden "$WORK/audit/small.h5" >/dev/null || { note "FAIL audit-hip: building the case"; failed=1; return; }
fi
expect audit-emu 0 timeout "$(left)" tdiff audit "$WORK/audit/small.h5" --policy fixed --seed 1 -o "$OUT/audit-emu"
if ! skipping audit-hip SKIP_HIP; then
  expect audit-hip 0 timeout "$(left)" tdiff audit "$WORK/audit/small.h5" --backend hip --policy fixed --seed 1 \
    -o "$OUT/audit-hip"
  expect audit-hip-vector 0 timeout "$(left)" tdiff audit "$WORK/audit/small.h5" --backend hip --hip-gemm vector \
    --policy fixed --seed 1 --no-full-runs -o "$OUT/audit-hip-vector"
fi
