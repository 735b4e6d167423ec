#pragma once
// Token verdicts of a generation case (docs/design/generation.md §1): every logits row that
// predicts a generated token, judged as the token it picks. The candidate is teacher-forced
// (its next input is the case's token whatever it predicted), so one flip does not end the
// comparison. Statistics here, from the two logits tensors (token_steps); the rule in
// classify_tokens, once the logits' expected error is known:
//   bound  = expected_fail · √2 · E · rms(reference row)  (two logits each off by the error
//            the candidate's formats explain, at the FAIL ratio of the tensor rule)
//   MATCH    same top-1, |log p_cand(t) − log p_ref(t)| ≤ bound
//   DRIFT    same top-1, its log-probability off by more than the bound
//   TIE-FLIP another top-1, the reference's top-1/top-2 gap ≤ bound (the formats explain it)
//   WRONG    another top-1 the bound does not explain
// Without an expected error (a dump judged without a policy) only exact ties are TIE-FLIPs.
// A repetition loop: a row's top-1 tokens end in an n-gram (n ≤ 8) repeated at least three
// times, counted only where the reference's top-1 tokens over the same steps do not.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

struct ExpectedError;

enum class TokenVerdict { match, drift, tie_flip, wrong };
const char* token_verdict_name(TokenVerdict v);  // "MATCH", "DRIFT", "TIE-FLIP", "WRONG"

struct TokenStep {
  std::int64_t row = 0, pos = 0;               // batch row, position of the logits row
  std::int64_t ref_token = 0, cand_token = 0;  // each side's top-1
  double ref_gap = 0.0;    // the reference's top-1 logit less its top-2 logit
  double logprob_ref = 0.0, logprob_cand = 0.0;  // log p of the reference's top-1, each side
  double rms = 0.0;        // RMS of the reference row's logits
  TokenVerdict verdict = TokenVerdict::match;  // classify_tokens
  double bound = 0.0;                          // the row's bound (classify_tokens; 0 without one)
};

struct RepetitionLoop {
  std::int64_t row = 0, from_step = 0;  // the step (within the row) where the repeats start
  std::int64_t ngram = 0, repeats = 0;
};

struct TokenSteps {
  std::int64_t rows = 0, steps_per_row = 0;
  std::vector<TokenStep> steps;  // row-major: row r's steps at [r · steps_per_row, …)
  // classify_tokens:
  bool bounded = false;                      // an expected error set the bound
  std::array<std::int64_t, 4> counts{};      // by TokenVerdict
  std::int64_t first_divergent = -1;         // index into steps of the first TIE-FLIP or WRONG (step order, then row)
  std::vector<RepetitionLoop> loops;         // the candidate's, not the reference's
};

// The steps of logits rows `positions` (the same in every batch row) of [B, S, V] tensors.
TokenSteps token_steps(const Tensor& ref, const Tensor& cand, const std::vector<std::int64_t>& positions);
// Sets each step's verdict and the summary. `expected` may be null; `expected_fail` is the
// tensor rule's FAIL ratio.
void classify_tokens(TokenSteps& t, const ExpectedError* expected, double expected_fail);
// The longest-lasting loop at the end of `tokens` (n ≤ 8, at least 3 repeats); repeats 0: none.
RepetitionLoop repetition_at_end(const std::vector<std::int64_t>& tokens);
// "24 steps: 22 MATCH, 1 DRIFT, 1 TIE-FLIP, 0 WRONG; first divergent: step 7 (row 0, pos 130) ..."
std::string token_summary(const TokenSteps& t);

}  // namespace tdiff
