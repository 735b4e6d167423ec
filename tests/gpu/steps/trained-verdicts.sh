# shellcheck shell=bash disable=SC2034,SC2154
# step: verdicts on a trained-profile model at real widths (layers 2,3: CSA, HCA; 16 experts; 2,304 tokens): fixed and naive on hip and emu, the a-priori rule alone and with the measured floor
#
# The FAIL/WARN counts of docs/design/tolerance-model.md and bench/README.md ("Verdicts on
# trained statistics"). TRAINED_RUNS picks the backends (default "hip emu"; "none": the model, case
# and reference only), TRAINED_POLICIES the policies (default "fixed naive"), TRAINED_FLOORS the
# --measured-floor settings (default "off on"), TRAINED_PROBES golden's conditioning probes
# (default 4; each costs one more evaluation of every stage).
model="$WORK/trained$sfx" case="$WORK/trained$sfx.h5"
clear_leftovers "$model" "$case"
if [ ! -f "$model/config.json" ]; then
  make_room trained 20 || return
  real_config "$WORK/trained$sfx.json" n_routed_experts=16 vocab_size=4096 || { note "FAIL trained: no config"; failed=1; return; }
  expect trained-synth 0 timeout "$(left)" tdiff synth --config "$WORK/trained$sfx.json" --layers 2,3 --profile trained \
    --seed 1 -o "$model" || return
fi
if [ ! -f "$case.golden-done" ]; then
  expect trained-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "${TRAINED_LEN:-2304}" --force \
    --seed 1 -o "$case" || return
  timed_golden trained-golden "$case" "$(left 30)" --conditioning-probes "${TRAINED_PROBES:-4}" || return
  touch "$case.golden-done"
fi
verdict() { sed -n 's/^verdict //p' "$OUT/$1.log" | head -1; }
[ "${TRAINED_RUNS:-}" = none ] && return
for run in ${TRAINED_RUNS:-hip emu}; do
  for policy in ${TRAINED_POLICIES:-fixed naive}; do
    for floor in ${TRAINED_FLOORS:-off on}; do
      name="trained-$run-$policy-floor-$floor"
      fits "$name" 20 || break 3
      want=0
      [ "$policy" = naive ] && want=1
      expect "$name" "$want" timeout "$(left)" tdiff run "$case" --backend "$run" --policy "$policy" \
        --measured-floor "$floor" --no-record -o "$OUT/$name"
      note "$name: $(verdict "$name")"
    done
  done
done
