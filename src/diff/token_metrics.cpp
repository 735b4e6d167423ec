// Per-token metrics: logits (top-1, top-k, KL) and routing (expert-set agreement).
// Tokens are independent, so each is computed by one thread into its own slot and the
// summaries are taken afterwards in token order: thread count never changes a result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "diff/metrics.h"

namespace tdiff {

namespace {

struct TokenRow {
  bool finite = true;
  bool top1 = true;
  int overlap = 0;
  double kl = 0.0;
};

void load_row(const Tensor& t, std::int64_t row, std::int64_t v, std::vector<double>& out) {
  out.resize(static_cast<std::size_t>(v));
  const std::int64_t base = row * v;
  if (t.dtype() == DType::f32) {
    const float* p = t.data<float>() + base;
    for (std::int64_t i = 0; i < v; ++i) out[static_cast<std::size_t>(i)] = p[i];
  } else if (t.dtype() == DType::f64) {
    const double* p = t.data<double>() + base;
    std::copy(p, p + v, out.begin());
  } else {
    for (std::int64_t i = 0; i < v; ++i) out[static_cast<std::size_t>(i)] = t.value(base + i);
  }
}

// log(sum(exp(x))), shifted by the maximum so that nothing overflows.
double log_sum_exp(const std::vector<double>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double s = 0.0;
  for (double v : x) s += std::exp(v - mx);
  return mx + std::log(s);
}

// Indices of the k largest values, largest first; equal values in index order, so the
// ranking is deterministic.
std::vector<std::int64_t> top_ids(const std::vector<double>& x, int k, std::vector<std::int64_t>& idx) {
  idx.resize(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto kk = static_cast<std::ptrdiff_t>(std::min<std::size_t>(static_cast<std::size_t>(k), x.size()));
  auto before = [&](std::int64_t a, std::int64_t b) {
    const double xa = x[static_cast<std::size_t>(a)], xb = x[static_cast<std::size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), before);
  return {idx.begin(), idx.begin() + kk};
}

bool all_finite(const std::vector<double>& x) {
  return std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
}

std::vector<TopEntry> top_entries(const std::vector<double>& x, const std::vector<std::int64_t>& ids) {
  const double lse = log_sum_exp(x);
  std::vector<TopEntry> out;
  for (auto id : ids) out.push_back({id, std::exp(x[static_cast<std::size_t>(id)] - lse)});
  return out;
}

}  // namespace

LogitsMetrics logits_metrics(const Tensor& ref, const Tensor& cand, const MetricOptions& opt) {
  if (ref.shape() != cand.shape())
    input_error("logits metrics: shape mismatch, reference {} vs candidate {}", shape_str(ref.shape()),
                shape_str(cand.shape()));
  LogitsMetrics m;
  if (ref.rank() == 0 || ref.numel() == 0) return m;
  m.vocab = ref.dim(-1);
  m.tokens = ref.numel() / m.vocab;
  const int k = std::max(1, opt.top_k);
  std::vector<TokenRow> rows(static_cast<std::size_t>(m.tokens));

#pragma omp parallel
  {
    std::vector<double> r, c;
    std::vector<std::int64_t> idx;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < m.tokens; ++t) {
      TokenRow& row = rows[static_cast<std::size_t>(t)];
      load_row(ref, t, m.vocab, r);
      load_row(cand, t, m.vocab, c);
      if (!all_finite(r) || !all_finite(c)) {
        row.finite = false;
        continue;
      }
      const double lse_r = log_sum_exp(r), lse_c = log_sum_exp(c);
      double kl = 0.0;
      for (std::size_t i = 0; i < r.size(); ++i) {
        const double lp = r[i] - lse_r;
        kl += std::exp(lp) * (lp - (c[i] - lse_c));
      }
      row.kl = std::max(0.0, kl);  // >= 0 in exact arithmetic; clamp rounding below zero
      auto tr = top_ids(r, k, idx);
      auto tc = top_ids(c, k, idx);
      row.top1 = tr.front() == tc.front();
      std::sort(tr.begin(), tr.end());
      std::sort(tc.begin(), tc.end());
      std::vector<std::int64_t> common;
      std::set_intersection(tr.begin(), tr.end(), tc.begin(), tc.end(), std::back_inserter(common));
      row.overlap = static_cast<int>(common.size());
    }
  }

  std::vector<double> kls;
  std::int64_t top1 = 0;
  double overlap_sum = 0.0;
  m.topk_overlap_min = 1.0;
  const int kk = static_cast<int>(std::min<std::int64_t>(k, m.vocab));
  for (const auto& row : rows) {
    if (!row.finite) {
      ++m.nonfinite_tokens;
      continue;
    }
    kls.push_back(row.kl);
    top1 += row.top1;
    const double ov = static_cast<double>(row.overlap) / kk;
    overlap_sum += ov;
    m.topk_overlap_min = std::min(m.topk_overlap_min, ov);
  }
  const auto n = static_cast<std::int64_t>(kls.size());
  if (n > 0) {
    m.top1_agree = static_cast<double>(top1) / static_cast<double>(n);
    m.topk_overlap_mean = overlap_sum / static_cast<double>(n);
    m.kl_mean = std::accumulate(kls.begin(), kls.end(), 0.0) / static_cast<double>(n);
    std::vector<double> sorted = kls;
    std::sort(sorted.begin(), sorted.end());
    const auto rank = static_cast<std::int64_t>(std::ceil(0.99 * static_cast<double>(n)));
    m.kl_p99 = sorted[static_cast<std::size_t>(std::max<std::int64_t>(rank, 1) - 1)];
    m.kl_max = sorted.back();
  }

  // The worst tokens with both sides' top-k, for the report.
  std::vector<std::int64_t> order;
  for (std::int64_t t = 0; t < m.tokens; ++t)
    if (rows[static_cast<std::size_t>(t)].finite) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return rows[static_cast<std::size_t>(a)].kl > rows[static_cast<std::size_t>(b)].kl;
  });
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(std::max(0, opt.worst_tokens))));
  std::vector<double> r, c;
  std::vector<std::int64_t> idx;
  for (auto t : order) {
    load_row(ref, t, m.vocab, r);
    load_row(cand, t, m.vocab, c);
    TokenDetail d;
    d.token = t;
    d.kl = rows[static_cast<std::size_t>(t)].kl;
    d.top_ref = top_entries(r, top_ids(r, k, idx));
    d.top_cand = top_entries(c, top_ids(c, k, idx));
    m.worst.push_back(std::move(d));
  }
  return m;
}

// rms over the finite elements: the scale a selection's margin is read against.
static double finite_rms(const Tensor& t) {
  double ss = 0;
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (const double v = t.value(i); std::isfinite(v)) ss += v * v, ++finite;
  return finite ? std::sqrt(ss / static_cast<double>(finite)) : 0.0;
}

RoutingMetrics routing_metrics(const Tensor& ref, const Tensor& cand, const Tensor* ref_scores, const Tensor* cand_scores) {
  if (ref.shape() != cand.shape())
    input_error("routing metrics: shape mismatch, reference {} vs candidate {}", shape_str(ref.shape()),
                shape_str(cand.shape()));
  RoutingMetrics m;
  if (ref.rank() == 0 || ref.numel() == 0) return m;
  m.k = ref.dim(-1);
  m.tokens = ref.numel() / m.k;
  std::int64_t experts = 0;
  if (ref_scores) {
    experts = ref_scores->rank() ? ref_scores->dim(-1) : 0;
    if (experts == 0 || ref_scores->numel() / experts != m.tokens)
      input_error("routing metrics: scores {} do not match {} tokens of selections {}",
                  shape_str(ref_scores->shape()), m.tokens, shape_str(ref.shape()));
    if (cand_scores && cand_scores->shape() != ref_scores->shape())
      input_error("routing metrics: candidate scores {} do not match the reference's {}", shape_str(cand_scores->shape()),
                  shape_str(ref_scores->shape()));
  }
  const double scores_rms = ref_scores ? finite_rms(*ref_scores) : 0.0;
  std::vector<std::int64_t> a, b, only_a, only_b;
  std::vector<double> sa, sb;
  for (std::int64_t t = 0; t < m.tokens; ++t) {
    a.clear(), b.clear(), only_a.clear(), only_b.clear();
    for (std::int64_t j = 0; j < m.k; ++j) {
      a.push_back(static_cast<std::int64_t>(ref.value(t * m.k + j)));
      b.push_back(static_cast<std::int64_t>(cand.value(t * m.k + j)));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_a));
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_b));
    if (only_a.empty()) {
      ++m.equal_tokens;
      continue;
    }
    m.flips += static_cast<std::int64_t>(only_a.size());
    // Counted in mismatch_share (not a tie) and, unless its own scores explain it, in unexplained_share.
    auto counts = [&](bool explained) {
      if (m.first_mismatch < 0) m.first_mismatch = t;
      if (!explained && m.first_unexplained < 0) m.first_unexplained = t;
    };
    if (!ref_scores) {
      counts(false);
      continue;
    }
    // A tie: the scores given up equal the scores taken, value for value.
    auto scores = [&](const std::vector<std::int64_t>& ids, std::vector<double>& out) {
      out.clear();
      for (auto id : ids) {
        if (id < 0 || id >= experts) return false;
        out.push_back(ref_scores->value(t * experts + id));
      }
      std::sort(out.begin(), out.end());
      return true;
    };
    if (!(scores(only_a, sa) && scores(only_b, sb))) {
      counts(false);
      continue;
    }
    if (sa == sb) {
      ++m.tie_tokens;
      continue;
    }
    const double given_up = sa.back(), took = sb.front();  // the reference's best given up, worst taken
    m.flip_margins.push_back({(given_up - took) / (std::fabs(given_up) + std::fabs(took) + 2 * scores_rms), false});
    if (!cand_scores) {
      counts(false);
      continue;
    }
    // Right on its own scores: a top-k of them. Every id it took (the -1 padding of the
    // indexer aside, each once) scores at least as high as every id it did not take; a NaN or
    // infinite score taken explains nothing.
    std::vector<double> own(static_cast<std::size_t>(experts));
    for (std::int64_t e = 0; e < experts; ++e) own[static_cast<std::size_t>(e)] = cand_scores->value(t * experts + e);
    std::vector<char> taken(static_cast<std::size_t>(experts), 0);
    bool valid = true;
    double lowest_taken = std::numeric_limits<double>::infinity();
    for (auto id : b) {
      if (id == -1) continue;
      if (id < 0 || id >= experts || taken[static_cast<std::size_t>(id)]) {
        valid = false;
        break;
      }
      const auto i = static_cast<std::size_t>(id);
      taken[i] = 1;
      valid = valid && std::isfinite(own[i]);
      lowest_taken = std::min(lowest_taken, own[i]);
    }
    for (std::size_t e = 0; valid && e < own.size(); ++e)
      if (!taken[e] && (std::isnan(own[e]) || own[e] > lowest_taken)) valid = false;
    if (valid) ++m.explained_tokens, m.flip_margins.back().explained = true;
    counts(valid);
  }
  const auto tokens = static_cast<double>(m.tokens);
  m.equal_share = static_cast<double>(m.equal_tokens) / tokens;
  m.mismatch_share = static_cast<double>(m.tokens - m.equal_tokens - m.tie_tokens) / tokens;
  m.unexplained_share = static_cast<double>(m.tokens - m.equal_tokens - m.tie_tokens - m.explained_tokens) / tokens;
  return m;
}

}  // namespace tdiff
