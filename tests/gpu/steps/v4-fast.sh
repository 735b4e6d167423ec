# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff run and tdiff bisect --backend hip (one injected fault; --policy naive) on the v4 case, end to end under GNU time, against the mixed-run targets (long)
#
# The targets at v4 (2 layers, 1024 tokens): tdiff run --backend hip end to end with the model's
# load within 15 s, a further mixed run 2 s, bisect naive complete within 120 s; each prints
# where its time goes, GNU time's wall clock and peak RSS beside. The injected fault (fp16
# RMSNorm statistics at one norm: it crosses the gate at v4, see audit-real) is bisected from
# fixed with the floor after each split (hip's default), then, when the budget has 120 s left,
# with --suffix reference (the float64 reference after each split, for the comparison: it
# recomputes the layers after the split).
v4_artefacts || return
[ -f "$WORK/v4$sfx.golden-done" ] || { expect v4-golden 0 timeout "$(left 60)" tdiff golden "$WORK/v4$sfx.h5" &&
  touch "$WORK/v4$sfx.golden-done"; } || return
# bisect_line PREFIX: the wall clock, the result and runs lines and each step's seconds of a
# measured tdiff bisect.
bisect_line() {
  echo "wall $(measured_wall "$1") (m:ss); $(grep -E '^ *([0-9.]+ +)?(result|runs) ' "$1.log" | tr '\n' '|'); steps: $(
    sed -n 's/.*timing step \([0-9]*\): \([0-9.]*\) s.*/\1:\2/p' "$1.log" | tr '\n' ' ')"
}
expect v4-fast-run 0 tests/gpu/measure "$OUT/v4-fast-run-m" "$(left)" tdiff run "$WORK/v4$sfx.h5" --backend hip \
  --policy fixed -o "$OUT/v4-fast-run"
note "v4-fast-run: wall $(measured_wall "$OUT/v4-fast-run-m") (m:ss); $(grep -iE 'time|timing' "$OUT/v4-fast-run-m.log" | tail -6 | tr '\n' '|')"
expect v4-fast-fault 1 tests/gpu/measure "$OUT/v4-fast-fault-m" "$(left)" tdiff bisect "$WORK/v4$sfx.h5" \
  --backend hip --set 'L01.attn_norm:norm_stats=fp16' -o "$OUT/v4-fast-fault"
note "v4-fast-fault: $(bisect_line "$OUT/v4-fast-fault-m")"
expect v4-fast-bisect 1 tests/gpu/measure "$OUT/v4-fast-bisect-m" "$(left)" tdiff bisect "$WORK/v4$sfx.h5" \
  --backend hip --policy naive -o "$OUT/v4-fast-bisect"
note "v4-fast-bisect: $(bisect_line "$OUT/v4-fast-bisect-m")"
if fits v4-fast-fault-ref 120; then
  expect v4-fast-fault-ref 1 tests/gpu/measure "$OUT/v4-fast-fault-ref-m" "$(left)" tdiff bisect "$WORK/v4$sfx.h5" \
    --backend hip --set 'L01.attn_norm:norm_stats=fp16' --suffix reference -o "$OUT/v4-fast-fault-ref"
  note "v4-fast-fault-ref: $(bisect_line "$OUT/v4-fast-fault-ref-m")"
fi
