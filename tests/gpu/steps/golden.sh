# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff ci cases/tiny and cases/small --backend hip --policy fixed (must pass), and naive caught on tiny (exit 1)
expect ci-tiny-fixed 0 tdiff ci cases/tiny --backend hip --policy fixed -o "$OUT/ci-tiny-fixed"
expect ci-small-fixed 0 tdiff ci cases/small --backend hip --policy fixed -o "$OUT/ci-small-fixed"
expect ci-tiny-naive 1 tdiff ci cases/tiny --backend hip --policy naive -o "$OUT/ci-tiny-naive"
