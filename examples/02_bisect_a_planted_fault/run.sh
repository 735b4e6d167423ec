#!/usr/bin/env bash
# Plant one fault (fp16 accumulation of the attention logits at L01.attn.core) on an fp32
# base and let the bisector find it: exit 1, first culprit L01.attn.core.
source "$(dirname "$0")/../common.sh"
make_tiny_case
expect 1 "$TDIFF" bisect tiny.h5 --policy fp32 --floor fp32 --set 'L01.attn.core:qk_accum=fp16' \
  -o bisect >bisect.txt 2>/dev/null
grep -q '^result    first culprit L01.attn.core ' bisect.txt
echo "$name: bisect named L01.attn.core ($(grep -c '^ *[0-9]' bisect.txt) trace rows)"
