#!/usr/bin/env bash
# A TOML policy file: fp32, plus fp16 softmax statistics at L02.attn.core. The run FAILs at
# that stage (exit 1), records the expanded policy; a knob on a stage that does not read it is
# an input error (exit 2).
source "$(dirname "$0")/../common.sh"
make_tiny_case
policy="$here/policy.toml"
expect 1 "$TDIFF" run tiny.h5 --policy "$policy" --run-id p1 -o run-policy >run.txt 2>/dev/null
grep -q '^first divergence: L02.attn.core/o' run.txt
grep -q -- "--policy $policy" run.txt      # the reproduce line names the file, absolute
python3 - <<'PY'
import json
env = json.load(open('run-policy/report.json'))['env']
assert 'L02.attn.core: softmax_stats=fp16' in env['policy_stages'], env['policy_stages']
PY
expect 2 "$TDIFF" run tiny.h5 --set 'L01.attn.q_a:qk_accum=fp16' --no-record --no-reports 2>err.txt
grep -q "does not apply to stage L01.attn.q_a" err.txt
echo "$name: the planted fault FAILs at L02.attn.core, the policy is recorded; a misplaced knob is exit 2"
