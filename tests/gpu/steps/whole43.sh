# shellcheck shell=bash disable=SC2034,SC2154
# step: V4-Flash's whole 43-layer schedule at real widths (v4-flash-narrow): synth, golden --store boundaries at W43_LEN tokens, hip fixed timed and recorded, resident against streamed (long)
#
# The model (tdiff synth --preset v4-flash-narrow, bf16: 16 experts of width 256, about 16 GB)
# and its case (1 prompt of W43_LEN tokens, 4096) stay in $WORK/w43*, and its reference (the
# layer boundaries and selections, --conditioning-probes 0: the probes would take an hour) is
# kept once finished (marker w43.golden-done), so running the step again goes on from where the
# budget cut it. Then:
#   run     tdiff run --backend hip --policy fixed --timed 3 against the stored stages
#           (W43_STAGES; the inner stages would be recomputed on the host, about as long as
#           golden), recorded in the case's run history under the label W43_LABEL (fixed);
#           the error over depth is in the report (report.json's error_over_depth);
#   bench   bench_hip --untapped-only (a tapped run's outputs would not fit the host: about 150 GB
#           at 43 layers) resident, then with the weights streamed layer by layer
#           (TDIFF_HIP_WEIGHT_GB=${W43_STREAM_GB:-4}): the slowdown of streaming, W43_RUNS (3)
#           timed forwards each.
# W43_PARTS ("golden run bench") picks the parts after the case; W43_LAYERS (all) synthesises
# only those layers of the schedule (tdiff synth --layers), in a folder of their own.
W43_LEN="${W43_LEN:-4096}"
W43_STAGES="${W43_STAGES:-*.hc_ffn.post,*.moe.select,*.attn.idx.topk,final.*,lm_head}"
model="$WORK/w43$sfx${W43_LAYERS:+-$W43_LAYERS}" case="$WORK/w43$sfx${W43_LAYERS:+-$W43_LAYERS}.h5"
w43_preset=v4-flash-narrow
[ -n "$sfx" ] && w43_preset=small
clear_leftovers "$model" "$case"
if [ ! -f "$model/config.json" ]; then
  make_room w43 60 || return
  fits w43-synth 120 || return
  expect w43-synth 0 timeout "$(left)" tdiff synth --preset "$w43_preset" ${W43_LAYERS:+--layers "$W43_LAYERS"} \
    --dtype bf16 --seed 1 -o "$model" || return
  note "w43-synth: $(du -sh "$model" | cut -f1)"
fi
if [ ! -f "$case" ]; then
  fits w43-case 60 || return
  expect w43-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "$W43_LEN" --seed 1 \
    -o "$case" || return
fi
w43_part() { [[ " ${W43_PARTS:-golden run bench} " == *" $1 "* ]]; }
if w43_part golden && { [ ! -f "$case.golden-done" ] || [ "$case" -nt "$case.golden-done" ]; }; then
  fits w43-golden 120 || return
  timed_golden w43-golden "$case" "$(left 10)" --store boundaries --conditioning-probes 0 || return
  touch "$case.golden-done"
  note "w43-golden: case $(du -h "$case" | cut -f1) on disk"
fi
if w43_part run && ! skipping w43-run SKIP_HIP && fits w43-run 90; then
  expect w43-run 0 env TDIFF_REF_CACHE_GB="${TDIFF_REF_CACHE_GB:-12}" timeout "$(left)" tdiff run "$case" \
    --backend hip --policy fixed --stages "$W43_STAGES" --timed 3 --label "${W43_LABEL:-fixed}" -o "$OUT/w43-run"
  note "w43-run: $(grep -E '^(verdict|summary|first divergence|logits|speed|timed|time)' "$OUT/w43-run.log" | tr '\n' '|')"
  tdiff history "$case" >"$OUT/w43-history.log" 2>&1
  python3 - "$OUT/w43-run/report.json" <<'PY' >"$OUT/w43-depth.log" 2>&1 && note "w43 error over depth: $(tr '\n' ' ' <"$OUT/w43-depth.log")"
import json, sys
rows = json.load(open(sys.argv[1])).get("error_over_depth") or []
print("; ".join("L%02d %.3g (x%s)" % (r["layer"], r["rel_l2"], "-" if r["growth"] is None else "%.3f" % r["growth"])
                for r in rows) or "no layer outputs compared")
PY
fi
if w43_part bench && ! skipping w43-bench SKIP_HIP && fits w43-bench 120; then
  expect w43-bench-resident 0 timeout "$(left)" bench_hip "$case" --untapped-only --runs "${W43_RUNS:-3}" \
    -o "$OUT/bench_hip_w43.json"
  expect w43-bench-streamed 0 env TDIFF_HIP_WEIGHT_GB="${W43_STREAM_GB:-4}" timeout "$(left)" bench_hip "$case" --untapped-only --runs "${W43_RUNS:-3}" \
    -o "$OUT/bench_hip_w43_streamed.json"
  for kind in resident streamed; do
    note "w43-bench $kind: untapped $(sed -n 's/^prefill, no stage tapped: *//p' "$OUT/w43-bench-$kind.log"); $(
      sed -n 's/^weights: //p' "$OUT/w43-bench-$kind.log")"
  done
fi
