# shellcheck shell=bash disable=SC2034,SC2154
# step: real4-golden then real4-run: v4-flash-dims layers 0-3 (sliding, sliding, CSA, HCA), release format, 1 prompt of 4096 tokens (long)
#
# The model (FP8/FP4, sharded) and case are built in $WORK when missing. The reference stores
# only REAL_STORE (the whole one, 38 GB, and the copy a run makes of it do not fit the 64 GB
# disk beside the model).
real4_artefacts || return
real4_golden || return
real4_run
