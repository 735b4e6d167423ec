# shellcheck shell=bash disable=SC2034,SC2154
# step: hf-client on the real4 release folder (loaded by tdiff_capture.release), a case of HF4_LEN (2304) tokens with the reference of every stage (long)
#
# The release folder (FP8/FP4, layers 0-3: sliding, sliding, CSA, HCA; built as real4 builds
# it): transformers bf16 loaded from the release by tdiff_capture.release, captured and
# isolated on a case of HF4_LEN tokens (2304: the indexer picks 512 of 576 entries) with the
# reference of every stage (about 21 GB: the 4096-token case's would be 38, too much beside the
# 16 GB model on the 64 GB disk), each dump judged by tdiff run, hip fixed beside. HF4_SECS
# (150): the seconds a mode needs left to start. It takes two runs of the step when the model
# is not built yet (synth about 250 s, then the reference; the dumps in the second run), one
# otherwise.
skipping hf-client-real4 SKIP_TORCH && return
model="$WORK/real4$sfx" case="$WORK/real4$sfx-hf${HF4_LEN:-2304}.h5"
clear_leftovers "$model" "$case"
# room for what is missing: the model (16 GB), the case (21 GB), the dumps (up to 9 GB)
make_room real4 $(( 9 + $([ -f "$model/config.json" ] && echo 0 || echo 16) + $([ -f "$case.golden-done" ] && echo 0 || echo 21) )) || return
real4_synth || return
if [ ! -f "$case.golden-done" ]; then
  rm -f "$case"
  fits hf4-golden 150 || return
  expect hf4-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "${HF4_LEN:-2304}" \
    --seed 1 -o "$case" || return
  timed_golden hf4-golden "$case" "$(left 10)" --tie-rule torch-cpu && touch "$case.golden-done" || return
fi
hf_client hf4 hip-real4 "$WORK/real4$sfx" "${HF4_SECS:-150}"
