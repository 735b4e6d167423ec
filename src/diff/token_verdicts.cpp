#include "diff/token_verdicts.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "base/error.h"
#include "diff/thresholds.h"

namespace tdiff {

namespace {

struct RowStats {
  std::int64_t top1 = 0, top2 = -1;
  double lse = 0.0, rms = 0.0;
};

// The row's top two (equal values: the lower index first), log-sum-exp and RMS; NaN-safe: a
// row with a NaN has lse NaN.
RowStats row_stats(const Tensor& t, std::int64_t base, std::int64_t V) {
  RowStats s;
  double best = -INFINITY, second = -INFINITY, sq = 0.0;
  bool nan = false;
  for (std::int64_t i = 0; i < V; ++i) {
    const double x = t.value(base + i);
    nan = nan || std::isnan(x);
    sq += x * x;
    if (x > best) second = best, s.top2 = s.top1, best = x, s.top1 = i;
    else if (x > second) second = x, s.top2 = i;
  }
  double sum = 0.0;
  for (std::int64_t i = 0; i < V; ++i) sum += std::exp(t.value(base + i) - best);
  s.lse = nan ? NAN : best + std::log(sum);
  s.rms = std::sqrt(sq / static_cast<double>(V));
  return s;
}

bool loops_before(const RepetitionLoop& a, const RepetitionLoop& b) {
  return a.repeats > 0 && (b.repeats == 0 || a.from_step < b.from_step);
}

}  // namespace

const char* token_verdict_name(TokenVerdict v) {
  switch (v) {
    case TokenVerdict::match: return "MATCH";
    case TokenVerdict::drift: return "DRIFT";
    case TokenVerdict::tie_flip: return "TIE-FLIP";
    case TokenVerdict::wrong: return "WRONG";
  }
  return "?";
}

TokenSteps token_steps(const Tensor& ref, const Tensor& cand, const std::vector<std::int64_t>& positions) {
  if (ref.rank() != 3 || cand.shape() != ref.shape())
    throw std::logic_error("token_steps: logits must be [B,S,V] on both sides, of one shape");
  const std::int64_t B = ref.dim(0), S = ref.dim(1), V = ref.dim(2);
  for (const auto p : positions)
    if (p < 0 || p >= S) throw std::logic_error("token_steps: a position outside the rows");
  TokenSteps t;
  t.rows = B;
  t.steps_per_row = static_cast<std::int64_t>(positions.size());
  t.steps.resize(static_cast<std::size_t>(B * t.steps_per_row));
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i = 0; i < B * t.steps_per_row; ++i) {
    TokenStep& st = t.steps[static_cast<std::size_t>(i)];
    st.row = i / t.steps_per_row;
    st.pos = positions[static_cast<std::size_t>(i % t.steps_per_row)];
    const std::int64_t base = (st.row * S + st.pos) * V;
    const RowStats r = row_stats(ref, base, V), c = row_stats(cand, base, V);
    st.ref_token = r.top1, st.cand_token = c.top1, st.rms = r.rms;
    st.ref_gap = r.top2 < 0 ? INFINITY : ref.value(base + r.top1) - ref.value(base + r.top2);
    st.logprob_ref = ref.value(base + r.top1) - r.lse;
    st.logprob_cand = cand.value(base + r.top1) - c.lse;
  }
  return t;
}

void classify_tokens(TokenSteps& t, const ExpectedError* expected, double expected_fail) {
  t.bounded = expected && expected->rel > 0.0 && std::isfinite(expected->rel);
  t.counts = {};
  for (auto& st : t.steps) {
    st.bound = t.bounded ? expected_fail * std::sqrt(2.0) * expected->rel * st.rms : 0.0;
    const bool finite = std::isfinite(st.logprob_cand);
    if (finite && st.cand_token == st.ref_token)
      st.verdict = std::fabs(st.logprob_cand - st.logprob_ref) <= st.bound || !t.bounded ? TokenVerdict::match
                                                                                         : TokenVerdict::drift;
    else
      st.verdict = finite && st.ref_gap <= st.bound ? TokenVerdict::tie_flip : TokenVerdict::wrong;
    ++t.counts[static_cast<std::size_t>(st.verdict)];
  }
  t.first_divergent = -1;
  for (std::int64_t s = 0; s < t.steps_per_row && t.first_divergent < 0; ++s)
    for (std::int64_t r = 0; r < t.rows; ++r) {
      const auto i = r * t.steps_per_row + s;
      const auto v = t.steps[static_cast<std::size_t>(i)].verdict;
      if (v == TokenVerdict::tie_flip || v == TokenVerdict::wrong) {
        t.first_divergent = i;
        break;
      }
    }
  t.loops.clear();
  for (std::int64_t r = 0; r < t.rows; ++r) {
    std::vector<std::int64_t> mine, theirs;
    for (std::int64_t s = 0; s < t.steps_per_row; ++s) {
      const TokenStep& st = t.steps[static_cast<std::size_t>(r * t.steps_per_row + s)];
      mine.push_back(st.cand_token), theirs.push_back(st.ref_token);
    }
    RepetitionLoop loop = repetition_at_end(mine);
    if (loops_before(loop, repetition_at_end(theirs))) loop.row = r, t.loops.push_back(loop);
  }
}

RepetitionLoop repetition_at_end(const std::vector<std::int64_t>& tokens) {
  RepetitionLoop best;
  const auto len = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t n = 1; n <= 8 && 3 * n <= len; ++n) {
    std::int64_t k = 1;
    while ((k + 1) * n <= len &&
           std::equal(tokens.end() - n, tokens.end(), tokens.end() - (k + 1) * n, tokens.end() - k * n))
      ++k;
    if (k >= 3 && k * n > best.repeats * best.ngram) best.ngram = n, best.repeats = k, best.from_step = len - k * n;
  }
  return best;
}

std::string token_summary(const TokenSteps& t) {
  std::string s = fmt::format("{} step{} x {} row{}: {} MATCH, {} DRIFT, {} TIE-FLIP, {} WRONG", t.steps_per_row,
                              t.steps_per_row == 1 ? "" : "s", t.rows, t.rows == 1 ? "" : "s", t.counts[0],
                              t.counts[1], t.counts[2], t.counts[3]);
  if (!t.bounded) s += " (no expected error: only exact ties are TIE-FLIPs, no DRIFT judged)";
  if (t.first_divergent >= 0) {
    const TokenStep& st = t.steps[static_cast<std::size_t>(t.first_divergent)];
    s += fmt::format("; first divergent: step {} (row {}, position {}): {} -> {} instead of {}, reference gap {:.3g}{}",
                     t.first_divergent % t.steps_per_row, st.row, st.pos, token_verdict_name(st.verdict),
                     st.cand_token, st.ref_token, st.ref_gap,
                     t.bounded ? fmt::format(" vs bound {:.3g}", st.bound) : "");
  }
  for (const auto& l : t.loops)
    s += fmt::format("; row {} loops from step {}: a {}-token n-gram repeated {} times to the end (the reference does "
                     "not)",
                     l.row, l.from_step, l.ngram, l.repeats);
  return s;
}

}  // namespace tdiff
