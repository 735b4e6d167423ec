# shellcheck shell=bash disable=SC2034,SC2154
# step: bench_hip on the v4 case (fixed; bf16 lm_head; one copy stream; V4_VALU=1: the vector ALU) and transformers bf16 through bench/hip/bench_hf.py
v4_artefacts
v4_bench
