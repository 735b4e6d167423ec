# shellcheck shell=bash disable=SC2034,SC2154
# step: bench_hip on the v4 case under naive and under fixed with one naive knob at a time: where naive's device time goes (per-stage classes on the summary)
#
# bench_hip's per-stage device times on v4 (2 layers, 1024 tokens) under naive and under fixed
# with one naive knob at a time (the GEMM accumulator, atomics, the logits, the attention's mask
# style and rescale order); NAIVE_VARIANTS="naive fixed ..." runs only those.
v4_artefacts || return
for v in ${NAIVE_VARIANTS:-naive fixed matmul_accum=fp16 reduction=atomic logits=fp16 mask_style=additive rescale_order=per_block}; do
  args=(--policy naive)
  [ "$v" = naive ] || args=(--policy fixed)
  [[ "$v" == *=* ]] && args+=(--set "$v")
  fits "naive-profile-$v" 30 || break
  expect "naive-profile-$v" 0 timeout "$(left)" bench_hip "$WORK/v4$sfx.h5" --runs 1 "${args[@]}" \
    -o "$OUT/bench_hip_${v//=/_}.json"
  note "naive-profile $v: $(sed -n 's/^prefill, no stage tapped: *//p' "$OUT/naive-profile-$v.log"); top: $(sed -n '/^by stage class/,/^$/p' "$OUT/naive-profile-$v.log" | sort -k2 -g -r | head -5 | awk '{printf "%s %s; ", $1, $2}')"
done
