# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff_gpu_tests Model.*: the whole model hip vs emu per stage (tiny, small), fixed repeats bit for bit, atomic differs
expect model 0 tdiff_gpu_tests --gtest_filter=Model.*
