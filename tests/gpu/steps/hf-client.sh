# shellcheck shell=bash disable=SC2034,SC2154
# step: transformers bf16 on the GPU as the candidate (tdiff_capture capture and isolate) on audit-hip's case, each dump judged by tdiff run, hip fixed beside
#
# A candidate nobody here wrote: the dumps of audit-hip's case (the trained small preset; run
# audit-hip first), each judged by tdiff run, beside hip fixed on the same case.
[ -f "$WORK/audit/small.h5" ] || { note "SKIP hf-client: run audit-hip first (its case)"; failed=1; return; }
skipping hf-client SKIP_TORCH && return
expect hf-capture 0 env PYTHONPATH=python timeout "$(left)" python3 -m tdiff_capture capture --model "$WORK/audit/small" \
  --case "$WORK/audit/small.h5" -o "$WORK/audit/hf-bf16.h5" --dtype bfloat16 --device cuda
expect hf-isolate 0 env PYTHONPATH=python timeout "$(left)" python3 -m tdiff_capture isolate --model "$WORK/audit/small" \
  --case "$WORK/audit/small.h5" -o "$WORK/audit/hf-bf16-iso.h5" --dtype bfloat16 --device cuda
for d in hf-bf16 hf-bf16-iso; do
  [ -f "$WORK/audit/$d.h5" ] && judge_dump "$d" "$WORK/audit/small.h5" "$WORK/audit/$d.h5"
done
skipping hf-client-hip SKIP_HIP || {
  tdiff run "$WORK/audit/small.h5" --backend hip --policy fixed --no-record -o "$OUT/hip-small-run" >"$OUT/hip-small-run.log" 2>&1
  note "hip fixed, same case: exit $? | $(grep -iE 'verdict|first divergence|logits' "$OUT/hip-small-run.log" | head -4 | tr '\n' '|')"
}
