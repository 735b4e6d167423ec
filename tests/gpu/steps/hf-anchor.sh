# shellcheck shell=bash disable=SC2034,SC2154
# step: transformers' float64 CPU forward (python/capture_hf.py --stages lm_head) beside tdiff golden at real widths, both times on one line, logits compared (long)
#
# Layers 2,3 of V4-Flash (CSA, HCA) at real widths with ANCHOR_EXPERTS (8) experts and a
# vocabulary of ANCHOR_VOCAB (4096): 0.7 G parameters, 2.8 GB in float32; ANCHOR_LEN (2304)
# tokens.
model="$WORK/anchor$sfx" case="$WORK/anchor$sfx.h5" hf="$WORK/anchor$sfx-hf.h5"
clear_leftovers "$model" "$case"
make_room anchor 4 || return
if [ ! -f "$model/config.json" ]; then
  real_config "$WORK/anchor$sfx.json" n_routed_experts="$ANCHOR_EXPERTS" vocab_size="$ANCHOR_VOCAB" ||
    { note "FAIL hf-anchor: no config"; failed=1; return; }
  expect hf-anchor-synth 0 timeout "$(left)" tdiff synth --config "$WORK/anchor$sfx.json" --layers 2,3 --seed 1 \
    -o "$model" || return
fi
if [ ! -f "$case" ]; then
  expect hf-anchor-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "$ANCHOR_LEN" \
    --seed 1 -o "$case" || return
fi
hf_line="transformers not run"
if ! skipping hf-anchor-hf SKIP_TORCH && fits hf-anchor-hf 90; then
  # Only the logits are written: the forward's time is transformers' own.
  expect hf-anchor-hf 0 timeout "$(left 60)" python3 python/capture_hf.py --model "$model" --case "$case" \
    --stages lm_head -o "$hf" && hf_line="transformers float64 forward: $(hf_timing "$OUT/hf-anchor-hf.log")"
fi
golden_line="tdiff golden not run" golden_ok=0
if fits hf-anchor-golden 60 &&
  timed_golden hf-anchor-golden "$case" "$(left 10)" --stages lm_head --tie-rule torch-cpu; then
  golden_line="tdiff golden (only lm_head stored): $timed_line" golden_ok=1
fi
note "hf-anchor ($ANCHOR_LEN tokens, $ANCHOR_EXPERTS experts, vocabulary $ANCHOR_VOCAB): $hf_line | $golden_line"
if [ -f "$hf" ] && [ "$golden_ok" = 1 ]; then
  expect hf-anchor-logits 0 python3 tests/support/oracle/compare_hf.py "$case" "$hf" --bound "$ORACLE_BOUND"
  note "hf-anchor-logits: $(grep -E '^lm_head' "$OUT/hf-anchor-logits.log")"
fi
