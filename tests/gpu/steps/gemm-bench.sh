# shellcheck shell=bash disable=SC2034,SC2154
# step: bench_gemm: the GEMM kernels side by side on v4-flash-dims shapes
expect gemm-bench 0 bench_gemm --runs 5
