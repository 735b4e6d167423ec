# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff golden on the v4 case (2 layers, 1024 tokens) under tests/gpu/measure, and bench_refcpu --model at the same widths (long)
#
# OMP_NUM_THREADS=REF_THREADS (16) bench_refcpu --model (v4) --tokens V4_LEN, where the
# bench_refcpu found has --model.
v4_artefacts || return
fits ref-speed-golden 60 || return
timed_golden ref-speed-golden "$WORK/v4$sfx.h5" "$(left 30)"
python3 bench/refcpu/project-43.py --log "$OUT/ref-speed-golden-timing.log" --model "$WORK/v4$sfx" \
  --tokens "$V4_LEN" 2>&1 | sed -n 's/^measured/ref-speed-golden per layer: measured/p' | while read -r line; do note "$line"; done
# bench_refcpu at real widths needs its --model option; an older one ignores unknown
# options and would run the small preset instead, so look for the option in the binary.
bench=$(command -v bench_refcpu || echo build/bench/refcpu/bench_refcpu)
if [ ! -x "$bench" ] || ! grep -aq -- '--model' "$bench"; then
  note "FAIL ref-speed-bench: $bench missing or without --model (not built into this .gpu-run yet)"
  failed=1
elif fits ref-speed-bench 60; then
  OMP_NUM_THREADS="${REF_THREADS:-16}" expect ref-speed-bench 0 timeout "$(left)" "$bench" --model "$WORK/v4$sfx" \
    --tokens "$V4_LEN"
  grep -E 'DGEMM|matmul-heavy|whole forward' "$OUT/ref-speed-bench.log" | while read -r line; do note "ref-speed-bench: $line"; done
fi
