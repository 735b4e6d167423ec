# shellcheck shell=bash disable=SC2034,SC2154
# step: hf-client at real widths on oracle-real's model and case (layers 2,3: CSA, HCA; 16 experts, vocabulary 4096, 2304 tokens), against the reference of every stage (long)
#
# 2304 tokens so that the indexer chooses; each dump judged by tdiff run, hip fixed on the same
# case beside them.
skipping hf-client-real SKIP_TORCH && return
oracle_artefacts hf-client-real 30 || return
oracle_golden hf-client-real "$(left 200)" || return
hf_client hf-real hip-real "$WORK/oracle$sfx" 60
