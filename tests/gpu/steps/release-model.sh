# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff_gpu_tests' release-format tests alone: the GEMMs, codes decoded once vs in the GEMM kernels, streamed vs resident
expect release-model 0 tdiff_gpu_tests --gtest_filter='Gemm.*:Model.*Release*:Model.Streamed*'
