#!/usr/bin/env bash
# The golden set cases/tiny, copied so that its cache stays out of the repository: fixed
# passes every case (exit 0), naive is caught (exit 1). Two cases, to stay within seconds.
source "$(dirname "$0")/../common.sh"
mkdir tiny-set && cp "$root"/cases/tiny/{suite.toml,prompts.txt,golden.txt} tiny-set/
cases='short-right,short-left'
expect 0 "$TDIFF" ci tiny-set --policy fixed --cases "$cases" -o ci-fixed >fixed.txt 2>/dev/null
grep -q '^verdict PASS' fixed.txt
[ -s ci-fixed/junit.xml ] && [ -s ci-fixed/index.html ]
expect 1 "$TDIFF" ci tiny-set --policy naive --cases "$cases" -o ci-naive >naive.txt 2>/dev/null
echo "$name: cases/tiny ($cases): fixed PASS, naive caught; junit.xml and index.html written"
