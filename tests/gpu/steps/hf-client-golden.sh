# shellcheck shell=bash disable=SC2034,SC2154
# step: transformers bf16 captured (free and replayed) and isolated on every case of the golden sets (HF_SETS, default "tiny small"), judged by tdiff ci --candidate-dumps, hip fixed beside
#
# As a user runs an engine of their own on a set: `tdiff ci --prepare` names each case's file
# and the model, the engine writes <case>.h5 into a folder (tdiff-capture --cases-from: the
# model loaded once), `tdiff ci --candidate-dumps --dump-policy fixed` judges them. Every case,
# the left-padded ones too (a candidate is judged there as anywhere); HF_MODES picks the modes
# (default "capture replay isolate": free, the reference's selections, isolated); hip fixed on the same cases beside.
skipping hf-client-golden SKIP_TORCH && return
for set in ${HF_SETS:-tiny small}; do
  fits "hf-golden-$set" 60 || continue
  cache="$WORK/ci-cache-$set" list="$WORK/hf-golden-$set.tsv"
  if ! tdiff ci "cases/$set" --cache "$cache" --prepare >"$list" 2>"$OUT/hf-golden-$set-prepare.log"; then
    note "FAIL hf-golden-$set-prepare: $(tail -1 "$OUT/hf-golden-$set-prepare.log")"
    failed=1
    continue
  fi
  for mode in ${HF_MODES:-capture replay isolate}; do
    dumps="$WORK/hf-golden-$set-$mode" t0=$SECONDS
    rm -rf "$dumps"
    # shellcheck disable=SC2046
    if ! PYTHONPATH=python timeout "$(left)" python3 -m tdiff_capture $(hf_mode_args "$mode") --cases-from "$list" -o "$dumps" \
      --dtype bfloat16 --device cuda --allow-left-padding >"$OUT/hf-golden-$set-$mode.log" 2>&1; then
      note "FAIL hf-golden-$set-$mode: $(tail -1 "$OUT/hf-golden-$set-$mode.log")"
      failed=1
      continue
    fi
    tdiff ci "cases/$set" --cache "$cache" --candidate-dumps "$dumps" --dump-policy fixed \
      -o "$OUT/hf-golden-$set-$mode-ci" >"$OUT/hf-golden-$set-$mode-ci.log" 2>&1
    rc=$?
    note "hf-golden-$set-$mode: $((SECONDS - t0)) s, ci exit $rc | $(grep -E '^verdict' "$OUT/hf-golden-$set-$mode-ci.log")"
  done
  skipping "ci-$set-hip-fixed" SKIP_HIP || ! fits "ci-$set-hip-fixed" 30 ||
    expect "ci-$set-hip-fixed" 0 tdiff ci "cases/$set" --cache "$cache" --backend hip --policy fixed -o "$OUT/ci-$set-hip-fixed"
done
