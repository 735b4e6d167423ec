#!/usr/bin/env bash
# A synthetic model, a case, its float64 reference, and two candidates judged against it:
# `fixed` passes (exit 0), `naive` fails (exit 1) with rope.main/cos as its first divergence.
source "$(dirname "$0")/../common.sh"
make_tiny_case
expect 0 "$TDIFF" run tiny.h5 --policy fixed -o run-fixed >fixed.txt 2>/dev/null
grep -q '^verdict PASS' fixed.txt
expect 1 "$TDIFF" run tiny.h5 --policy naive -o run-naive >naive.txt 2>/dev/null
grep -q '^first divergence: rope.main/cos' naive.txt
head -1 run-naive/report.csv | grep -q '^stage,tensor,cosine,max_abs,rmse,rel_l2,verdict'
echo "$name: fixed PASS, naive FAIL at rope.main/cos (reports: run-fixed/, run-naive/ under OUT when set)"
