# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff_gpu_tests --gtest_filter="$GTEST_FILTER" (default *): the GPU tests a change touched
expect gtest 0 tdiff_gpu_tests --gtest_filter="${GTEST_FILTER:-*}"
