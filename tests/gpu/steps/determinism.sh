# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff determinism --backend hip --runs 5 on the small preset: fixed bit-identical (exit 0), reduction=atomic differing (exit 1)
tdiff synth --preset small --seed 3 -o "$WORK/small" >/dev/null &&
  tdiff case new --model "$WORK/small" --random-prompts 3 --len 96 --seed 3 -o "$WORK/small.h5" --force >/dev/null
expect determinism-fixed 0 tdiff determinism "$WORK/small.h5" --backend hip --policy fixed --runs 5 --no-reports
expect determinism-atomic 1 tdiff determinism "$WORK/small.h5" --backend hip --policy fixed --set reduction=atomic \
  --runs 5 --no-reports
