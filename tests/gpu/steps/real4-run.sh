# shellcheck shell=bash disable=SC2034,SC2154
# step: tdiff run --backend hip --policy fixed on real4's case, against the REAL_STORE stages of its reference (long)
real4_artefacts || return
real4_run
