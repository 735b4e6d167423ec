# shellcheck shell=bash disable=SC2034,SC2154
# step: the transformers oracle at real widths (layers 2,3, 16 experts, 2304 tokens), every stage class within 1e-6 per token by tests/support/oracle/compare_hf.py, else exit 1 (long)
#
# Layers 2,3 at real widths (CSA, HCA), ORACLE_EXPERTS experts, vocabulary ORACLE_VOCAB: model
# 4.5 GB (float32), transformers' dump of every stage 9.9 GB (float64), the reference as much.
# The indexer scores are judged at ORACLE_SCORE_BOUND (1e-4: float32 in transformers);
# ORACLE_STAGES captures only these stages (default all). Captured with --rope-f64
# (python/tdiff_capture/rope.py: the tables in float64, a deliberate deviation from stock
# transformers for the oracle; its dump has a name of its own), so the acceptance holds at every
# position; ORACLE_ROPE_F64=0: transformers' float32 tables, judged on the first
# ORACLE_POSITIONS (512) tokens.
rope_args=() positions="${ORACLE_POSITIONS:-512}" hf="$WORK/oracle$sfx-hf.h5"
if [ "${ORACLE_ROPE_F64:-1}" = 1 ]; then
  rope_args=(--rope-f64) positions="${ORACLE_POSITIONS:-0}" hf="$WORK/oracle$sfx-hf-rope64.h5"
fi
oracle_artefacts oracle-real 26 || return
if [ ! -f "$hf" ] && ! skipping oracle-real-hf SKIP_TORCH && fits oracle-real-hf 200; then
  expect oracle-real-hf 0 timeout "$(left)" python3 python/capture_hf.py --model "$model" --case "$case" \
    ${ORACLE_STAGES:+--stages "$ORACLE_STAGES"} "${rope_args[@]}" -o "$hf" &&
    note "oracle-real-hf: $(hf_timing "$OUT/oracle-real-hf.log")"
fi
if [ ! -f "$hf" ]; then
  note "SKIP oracle-real: no transformers dump $hf to compare with"
  [ "${SKIP_TORCH:-0}" = 1 ] || failed=1
  return
fi
oracle_golden oracle-real "$(left 90)" || return
fits oracle-real 90 || return
# transformers computes the RoPE tables in float32 (model-spec §3.9/3.10): its angles drift with
# position, and so does everything downstream. The acceptance (model-spec §3.10: 1e-6 relative on the
# layer outputs and the logits) is judged on the first `positions` tokens (0: all); every
# stage at 256, 1024 and all positions is printed beside it (oracle-real-positions-N).
expect oracle-real 0 timeout "$(left)" python3 tests/support/oracle/compare_hf.py "$case" "$hf" --bound "$ORACLE_BOUND" \
  --score-bound "$ORACLE_SCORE_BOUND" --positions "$positions" --classes 'hc_ffn.post/X|lm_head/logits'
for n in 256 1024 0; do
  python3 tests/support/oracle/compare_hf.py "$case" "$hf" --bound "$ORACLE_BOUND" --score-bound "$ORACLE_SCORE_BOUND" \
    --positions "$n" >"$OUT/oracle-real-positions-$n.log" 2>&1
done
for log in oracle-real oracle-real-positions-256 oracle-real-positions-1024 oracle-real-positions-0; do
  note "$log: $(tail -1 "$OUT/$log.log"); $(grep -E '^(Lxx.hc_ffn.post/X|lm_head/logits|Lxx.attn.core/o|rope.main/cos|Lxx.moe.select/idx|Lxx.attn.idx.topk/sel) ' \
    "$OUT/$log.log" | awk '{printf "%s %s; ", $1, $2}')"
done
