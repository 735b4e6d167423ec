# shellcheck shell=bash disable=SC2034,SC2154
# step: the reference of the v4 case on all cores, then tdiff run --backend hip --policy fixed against it
v4_artefacts
v4_golden
