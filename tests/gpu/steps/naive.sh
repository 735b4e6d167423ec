# shellcheck shell=bash disable=SC2034,SC2154
# step: golden's last part alone: tdiff ci cases/tiny --backend hip --policy naive must be caught (exit 1)
expect ci-tiny-naive 1 tdiff ci cases/tiny --backend hip --policy naive -o "$OUT/ci-tiny-naive"
