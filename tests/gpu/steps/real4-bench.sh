# shellcheck shell=bash disable=SC2034,SC2154
# step: bench_hip and transformers bf16 (bench/hip/bench_hf.py on the release folder itself) on real4's model and case; REAL4_BENCH picks the parts (long)
#
# The real4 model (release layout) and case as real4 builds them (built here when missing),
# then on the same prompt of 4096 tokens, both prefill times on one summary line:
#   hip     bench_hip under fixed: the weights' upload and quantisation in the warm-up, then 3
#           tapped and 3 untapped runs;
#   kernel  the same forward with the release codes decoded inside the GEMM kernels
#           (TDIFF_HIP_DECODE=kernel: the way for a model whose decoded weights do not fit, e.g.
#           the whole release on an MI250);
#   hf      transformers bf16 through bench/hip/bench_hf.py, which loads the release folder
#           through tdiff_capture.release (python/tdiff_capture/release.py): the model built on
#           the GPU in bf16, 55 GB, each tensor dequantised there; then 2 warm-up and 3 timed
#           forwards.
# REAL4_BENCH="hip kernel hf" (the default) names the parts to run. REAL4_STREAM=1 adds
# bench_hip with the weights streamed layer by layer (TDIFF_HIP_WEIGHT_GB=${STREAM_GB:-6}, a
# 6 GiB budget for the 16 GB model): the slowdown against the resident run.
real4_artefacts || return
hip_line="bench_hip not run" hf_line="transformers not run"
if wanted hip && ! skipping real4-bench-hip SKIP_HIP && fits real4-bench-hip 120 &&
  expect real4-bench-hip 0 timeout "$(left)" bench_hip "$case" --runs 3 -o "$OUT/bench_hip_real4.json"; then
  hip_line="bench_hip fixed: untapped $(sed -n 's/^prefill, no stage tapped: *//p' "$OUT/real4-bench-hip.log"), all tapped $(
    sed -n 's/^prefill, all stages tapped (outputs copied to the host): *//p' "$OUT/real4-bench-hip.log")"
fi
if wanted kernel && ! skipping real4-bench-kernel SKIP_HIP && fits real4-bench-kernel 90 &&
  expect real4-bench-kernel 0 env TDIFF_HIP_DECODE=kernel timeout "$(left)" bench_hip "$case" --runs 3 \
    -o "$OUT/bench_hip_real4_kernel_decode.json"; then
  note "real4-bench TDIFF_HIP_DECODE=kernel: untapped $(sed -n 's/^prefill, no stage tapped: *//p' \
    "$OUT/real4-bench-kernel.log"); $(sed -n 's/^weights: //p' "$OUT/real4-bench-kernel.log")"
fi
if [ "${REAL4_STREAM:-0}" = 1 ] && ! skipping real4-bench-stream SKIP_HIP && fits real4-bench-stream 60 &&
  expect real4-bench-stream 0 env TDIFF_HIP_WEIGHT_GB="${STREAM_GB:-6}" timeout "$(left)" bench_hip "$case" --runs 3 \
    -o "$OUT/bench_hip_real4_streamed.json"; then
  note "real4-bench streamed (TDIFF_HIP_WEIGHT_GB=${STREAM_GB:-6}): untapped $(sed -n 's/^prefill, no stage tapped: *//p' \
    "$OUT/real4-bench-stream.log"); $(sed -n 's/^weights: //p' "$OUT/real4-bench-stream.log")"
fi
if wanted hf && ! skipping real4-bench-hf SKIP_TORCH && fits real4-bench-hf 150 &&
  expect real4-bench-hf 0 timeout "$(left)" python3 bench/hip/bench_hf.py --model "$model" --case "$case" \
    --runs 3 -o "$OUT/bench_hf_real4.json"; then
  hf_line="transformers $(python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print("%s: %.2f ms (median of %s; experts %s, attention %s; release loaded in %s s)" % (j["dtype"], j["prefill_ms_median"],
      len(j["prefill_ms"]), j["experts_implementation"], j["attn_implementation"], j.get("load_s")))' "$OUT/bench_hf_real4.json" 2>&1)"
fi
note "real4-bench ($REAL_LEN tokens, layers $REAL_LAYERS, release layout): $hip_line | $hf_line"
