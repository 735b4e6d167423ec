# shellcheck shell=bash disable=SC2034,SC2154
# step: real4's reference under tests/gpu/measure (wall time, peak RSS, seconds per layer) and bench/refcpu/project-43.py's projection to 43 layers (long)
real4_artefacts || return
real4_golden
