#!/usr/bin/env bash
# An engine tdiff did not write, judged from its dump: tap_emu (tdiff's emu standing in for
# your engine, writing every stage through the tap) under naive, then `tdiff run
# --candidate-dump`. Mode run: exit 1 (naive fails); mode isolated: the stages ranked by their
# own error; under fixed, modes run and replay pass; run by tdiff (--candidate-cmd), bisect names
# a planted fault. tap_minimal writes a one-tensor dump through the C interface.
source "$(dirname "$0")/../common.sh"
TAP_EMU="${TAP_EMU:-$(dirname "$TDIFF")/tap_emu}"
TAP_MINIMAL="${TAP_MINIMAL:-$(dirname "$TDIFF")/tap_minimal}"
[ -x "$TAP_EMU" ] || { echo "$name: no tap_emu at $TAP_EMU (set TAP_EMU)" >&2; exit 2; }
make_tiny_case
"$TAP_EMU" tiny.h5 naive 7 engine.h5 >/dev/null
expect 1 "$TDIFF" run tiny.h5 --candidate-dump engine.h5 --dump-policy naive -o judged >judged.txt 2>/dev/null
grep -q '^first divergence: rope.main/cos' judged.txt
"$TAP_EMU" tiny.h5 naive 7 iso.h5 isolated >/dev/null
expect 1 "$TDIFF" run tiny.h5 --candidate-dump iso.h5 --dump-policy naive --no-record -o isolated >iso.txt 2>/dev/null
grep -q "^isolated stages (each on the reference.s inputs), ranked by local error" iso.txt
# A correct bf16 port (fixed) passes free-running, against the reference that follows its
# choices, and replayed, on the reference's choices.
"$TAP_EMU" tiny.h5 fixed 7 free.h5 run >/dev/null
expect 0 "$TDIFF" run tiny.h5 --candidate-dump free.h5 --dump-policy fixed --no-record --no-reports >free.txt 2>/dev/null
grep -q "^selections: the reference followed the dump's choices" free.txt
"$TAP_EMU" tiny.h5 fixed 7 replay.h5 replay >/dev/null
expect 0 "$TDIFF" run tiny.h5 --candidate-dump replay.h5 --dump-policy fixed --no-record --no-reports >/dev/null 2>&1
# tdiff runs the engine itself (--candidate-cmd, docs/reference/engine-protocol.md): with an
# fp16 softmax planted at L02.attn.core on an fp32 base, bisect names that stage, as it names
# it for the emu backend.
printf 'preset = "fp32"\n[[override]]\nstages = "L02.attn.core"\nsoftmax_stats = "fp16"\n' >fault.toml
expect 1 "$TDIFF" bisect tiny.h5 --candidate-cmd "'$TAP_EMU' --request fault.toml" --policy fp32 --floor fp32 \
  --no-reports >bisect.txt 2>/dev/null
grep -q "^result    first culprit L02.attn.core" bisect.txt
if [ -x "$TAP_MINIMAL" ]; then "$TAP_MINIMAL" minimal.h5 >/dev/null && [ -s minimal.h5 ]; fi
echo "$name: the tapped engine's dump is judged like a backend (first divergence rope.main/cos); bisect names its fault"
