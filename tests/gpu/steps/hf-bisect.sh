# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff bisect drives transformers (float32 on the GPU) through tdiff-capture engine, clean and with one projection planted in float16; the culprit it names
#
# As a user bisects an engine of their own: `tdiff bisect CASE --candidate-cmd 'tdiff-capture
# engine ...'` runs transformers once for every set of stages a mixed run needs (docs/reference/
# engine-protocol.md). On the tiny model's 96-token case (unpadded; the reference in float64):
# float32 with no fault (which stage, if any, it names), then with model.layers.1.self_attn.o_b_proj
# computing in float16 (HFB_FAULT), which bisect must name as L01.attn.o_b (HFB_STAGE): as the
# first culprit, or, where it does not reach the logits past the floor's own error, as the
# largest local deviation from the floor.
skipping hf-bisect SKIP_TORCH && return
fits hf-bisect 120 || return
dir="$WORK/hf-bisect"
mkdir -p "$dir"
if [ ! -f "$dir/tiny.h5.done" ]; then
  expect hfb-synth 0 tdiff synth --preset tiny --seed 1 -o "$dir/tiny" || return
  expect hfb-case 0 tdiff case new --model "$dir/tiny" --random-prompts 1 --len 96 --seed 2 -o "$dir/tiny.h5" || return
  expect hfb-golden 0 tdiff golden "$dir/tiny.h5" --tie-rule torch-cpu && touch "$dir/tiny.h5.done" || return
fi
engine="env PYTHONPATH=$PWD/python python3 -m tdiff_capture engine --model $dir/tiny --dtype float32 --device cuda"
for run in clean fault; do
  fits "hfb-$run" 60 || break
  cmd="$engine"
  [ "$run" = fault ] && cmd="$engine --fault ${HFB_FAULT:-model.layers.1.self_attn.o_b_proj=float16}"
  t0=$SECONDS
  timeout "$(left)" tdiff bisect "$dir/tiny.h5" --candidate-cmd "$cmd" --policy fp32 --floor fp32 \
    -o "$OUT/hfb-$run" >"$OUT/hfb-$run.log" 2>&1
  rc=$?
  note "hfb-$run: exit $rc in $((SECONDS - t0)) s | $(grep -E '^(result|engine:)' "$OUT/hfb-$run.log" | tr '\n' '|')"
  if [ "$run" = fault ] && ! grep -qE "^result .*(culprit|deviation from the floor is) ${HFB_STAGE:-L01.attn.o_b}" "$OUT/hfb-$run.log"; then
    note "FAIL hfb-fault: bisect did not name ${HFB_STAGE:-L01.attn.o_b}"
    failed=1
  fi
done
