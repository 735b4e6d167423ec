# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff_gpu_tests: every kernel against refcpu and emu (all but Model.*)
expect kernels 0 tdiff_gpu_tests --gtest_filter=-Model.*
