# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff audit --backend hip --policy fixed with full runs on the trained profile at v4's dimensions (2 layers, 1024 tokens): the audit table at real widths (long)
#
# Every stage's reference is stored (about 5 GB); the model, case and reference stay in $WORK.
model="$WORK/v4t$sfx" case="$WORK/v4t$sfx.h5"
clear_leftovers "$model" "$case"
if [ ! -f "$model/config.json" ]; then
  make_room v4t 40 || return
  expect audit-real-synth 0 timeout "$(left)" tdiff synth --preset "$V4_PRESET" --layers 2 --dtype bf16 --profile trained \
    --seed 1 -o "$model" || return
fi
if [ ! -f "$case.golden-done" ]; then
  rm -f "$case"
  expect audit-real-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "$V4_LEN" \
    --seed 1 -o "$case" || return
  expect audit-real-golden 0 timeout "$(left 60)" tdiff golden "$case" && touch "$case.golden-done" || return
fi
skipping audit-real-hip SKIP_HIP ||
  expect audit-real-hip 0 timeout "$(left)" tdiff audit "$case" --backend hip --policy fixed --seed 1 -o "$OUT/audit-real-hip"
