# shellcheck shell=bash disable=SC2034,SC2154
# step: v4-bench then v4-golden on one v4 model and case (v4-flash-dims, 2 layers, 1 prompt of V4_LEN=1024 tokens)
v4_artefacts
v4_bench
v4_golden
