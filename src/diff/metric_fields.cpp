#include "diff/metric_fields.h"

#include <array>

namespace tdiff {

namespace {

using T = TensorMetrics;
using L = LogitsMetrics;
using R = RoutingMetrics;
constexpr unsigned kFiles = kShowFiles, kLead = kShowFiles | kShowLead | kShowTable, kTable = kShowFiles | kShowTable;

// cosine, max_abs, rmse and rel_l2 lead report.csv (stable for users' scripts); the CSV lists
// the lead fields first, then the verdict, then the others in this order.
constexpr std::array<MetricField<T>, 28> kTensor{{
    {"cosine", "cosine", &T::cosine, kLead},
    {"max_abs", "max_abs", &T::max_abs, kLead},
    {"max_abs_scaled", "max_abs_scaled", &T::max_abs_scaled, kFiles},
    {"err_rel", "err_rel", &T::err_rel, kTable},
    {"rmse", "rmse", &T::rmse, kLead},
    {"rel_l2", "rel_l2", &T::rel_l2, kLead},
    {"rel_elem", "rel_elem", &T::rel_elem, kFiles},
    {"max_rel", "max_rel", &T::max_rel, kFiles},
    {"ref_rms", "ref_rms", &T::ref_rms, kTable},
    {"max_abs_ref", "max_abs_ref", &T::max_abs_ref, kFiles},
    {"count", "count", &T::count, kFiles},
    {"compared", "compared", &T::compared, kFiles},
    {"n_diff", "n_diff", &T::n_diff, kFiles},
    {"nan_ref", "nan_ref", &T::nan_ref, kFiles},
    {"inf_ref", "inf_ref", &T::inf_ref, kFiles},
    {"nan_cand", "nan_cand", &T::nan_cand, kFiles},
    {"inf_cand", "inf_cand", &T::inf_cand, kFiles},
    {"new_nonfinite", "new_nonfinite", &T::new_nonfinite, kFiles},
    {"argmax_abs", "argmax_abs", &T::argmax_abs, kFiles},
    {"argmax_abs_scaled", "argmax_abs_scaled", &T::argmax_abs_scaled, kFiles},
    {"argmax_err_rel", "argmax_err_rel", &T::argmax_err_rel, kFiles},
    {"ref_at_err", "ref_at_err", &T::ref_at_err, kFiles},
    {"cand_at_err", "cand_at_err", &T::cand_at_err, kFiles},
    {"first_new_nonfinite", "first_new_nonfinite", &T::first_new_nonfinite, kFiles},
    {"ref_at_new_nonfinite", "ref_at_new_nonfinite", &T::ref_at_new_nonfinite, kFiles},
    {"cand_at_new_nonfinite", "cand_at_new_nonfinite", &T::cand_at_new_nonfinite, kFiles},
    // What a verdict's reason quotes (how max_abs_scaled was scaled); in no report.
    {"ref_at_max_abs_scaled", nullptr, &T::ref_at_max_abs_scaled, 0},
    {"max_abs_scale", nullptr, &T::max_abs_scale, 0},
}};

constexpr std::array<MetricField<L>, 9> kLogits{{
    {"tokens", nullptr, &L::tokens, kFiles},
    {"vocab", nullptr, &L::vocab, kFiles},
    {"nonfinite_tokens", nullptr, &L::nonfinite_tokens, kFiles},
    {"top1_agree", "top1_agree", &L::top1_agree, kFiles},
    {"topk_overlap_mean", "topk_overlap_mean", &L::topk_overlap_mean, kFiles},
    {"topk_overlap_min", "topk_overlap_min", &L::topk_overlap_min, kFiles},
    {"kl_mean", "kl_mean", &L::kl_mean, kFiles},
    {"kl_p99", "kl_p99", &L::kl_p99, kFiles},
    {"kl_max", "kl_max", &L::kl_max, kFiles},
}};

constexpr std::array<MetricField<R>, 15> kRouting{{
    {"tokens", nullptr, &R::tokens, kFiles},
    {"k", nullptr, &R::k, kFiles},
    {"equal_tokens", nullptr, &R::equal_tokens, kFiles},
    {"equal_share", "routing_equal_share", &R::equal_share, kFiles},
    {"mismatch_share", "routing_mismatch_share", &R::mismatch_share, kFiles},
    {"flips", "routing_flips", &R::flips, kFiles},
    {"tie_tokens", "routing_ties", &R::tie_tokens, kFiles},
    {"explained_tokens", "routing_explained", &R::explained_tokens, kFiles},
    {"unexplained_share", "routing_unexplained_share", &R::unexplained_share, kFiles},
    {"replayed", "routing_replayed", &R::replayed, kFiles},
    {"own_path", "routing_own_path", &R::own_path, kFiles},
    {"first_mismatch", "routing_first_mismatch", &R::first_mismatch, kFiles},
    {"first_unexplained", "routing_first_unexplained", &R::first_unexplained, kFiles},
    {"within_margin_tokens", nullptr, &R::within_margin_tokens, kFiles},
    {"within_margin_unexplained", nullptr, &R::within_margin_unexplained, kFiles},
}};

}  // namespace

std::span<const MetricField<TensorMetrics>> tensor_metric_fields() { return kTensor; }
std::span<const MetricField<LogitsMetrics>> logits_metric_fields() { return kLogits; }
std::span<const MetricField<RoutingMetrics>> routing_metric_fields() { return kRouting; }

}  // namespace tdiff
