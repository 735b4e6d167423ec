#!/usr/bin/env bash
# Bit for bit: naive's atomic reductions make runs differ (exit 1), fixed repeats (exit 0).
# Then a two-knob precision audit with fp32 stores (exit 0), and the record every check leaves
# in the run history beside the case.
source "$(dirname "$0")/../common.sh"
make_tiny_case
expect 1 "$TDIFF" determinism tiny.h5 --backend emu --policy naive --runs 2 -o det-naive >naive.txt 2>/dev/null
grep -q '^verdict     NONDETERMINISTIC' naive.txt
expect 0 "$TDIFF" determinism tiny.h5 --backend emu --policy fixed --runs 2 --threads 1,2 -o det-fixed >fixed.txt 2>/dev/null
expect 0 "$TDIFF" audit tiny.h5 --knob qk_accum --knob softmax_stats --set storage=fp32 --no-full-runs -o audit >audit.txt 2>/dev/null
grep -q '^qk_accum ' audit.txt && [ -s audit/audit.csv ]
# Every check left its record in the run history (tdiff-history.sqlite): tdiff info lists them.
"$TDIFF" info tiny.h5 >info.txt
grep -Eq '^history   [0-9]+ runs in ' info.txt && grep -q '  determinism NONDETERMINISTIC' info.txt
"$TDIFF" history tiny.h5 --kind determinism --runs >history.txt
grep -q 'determinism' history.txt
echo "$name: naive nondeterministic, fixed bit for bit over 1 and 2 threads, audit table written, checks in the run history"
