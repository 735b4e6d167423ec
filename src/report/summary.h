#pragma once
// Views of a CompareResult shared by the report writers: per-stage rows, the worst tensors,
// verdict counts, number formatting.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "diff/compare.h"

namespace tdiff::report {

struct StageSummary {
  std::string stage;
  int layer = -1;
  Verdict verdict = Verdict::pass;
  bool has_values = false;      // at least one floating-point tensor
  double cosine = 1.0;          // lowest over its floating-point tensors
  double max_abs = 0.0;         // highest over its floating-point tensors
  double max_abs_scaled = 0.0;  // highest over its floating-point tensors
  std::vector<std::size_t> rows;  // indices into CompareResult::rows
  std::string reason;           // the worst tensor's reason
};
std::vector<StageSummary> summarize_stages(const CompareResult& r);

// Rows ordered worst first (verdict, then relative L2 error / mismatch share); at most n,
// and only rows with an error at all.
std::vector<std::size_t> worst_rows(const CompareResult& r, std::size_t n);
// RFC 4180: a CSV field, quoted when it holds a comma, quote or newline (quotes doubled).
std::string csv_field(const std::string& s);
// A scale-free error for ranking: rel_l2 for floats, mismatch share for exact tensors.
double row_error(const TensorDiff& d);
std::string error_text(const TensorDiff& d);  // "rel_l2 0.012" or "3.1% differ"

// The expected error and the ratio to it ("2.3e-03", "1.4"), "-" where the row has none.
std::string expected_text(const TensorDiff& d);
std::string ratio_text(const TensorDiff& d);
// The element the row points at (diff/location.h pointed_element), what it is, where in the
// model's terms and the two values there: "largest error at row 1, token 23, head 2, ch 17:
// reference 1.23, candidate 1.25", "new NaN at row 0, token 13, head 1, ch 5: reference
// 0.0312, candidate nan", "other selection at row 1, token 4"; "" for rows without a difference.
std::string where_text(const CompareResult& r, const TensorDiff& d);
// The location alone ("row 1, token 23, head 2, ch 17"), "" where where_text is.
std::string location_of(const CompareResult& r, const TensorDiff& d);

struct Counts {
  int pass = 0, warn = 0, fail = 0;
};
Counts count_verdicts(const CompareResult& r);

// What made the run's verdict, so that no report's counts read as a contradiction ("WARN: 0
// WARN" when the WARN came from tensors on one side only): "2 tensors FAIL", "1 tensor WARN,
// 3 on one side only", "3 tensors on one side only", "every tensor PASS".
std::string verdict_cause(const CompareResult& r);
// The verdict line of every report: "WARN (3 tensors on one side only): 0 FAIL, 0 WARN, 5 PASS
// of 5 tensors; 3 only in the reference, 0 only in the candidate".
std::string verdict_line(const CompareResult& r);
// " (30 padding tokens left out)" when the per-token statistics left some out, else "".
std::string padding_note(const CompareResult& r);
// "N tokens followed their own selection (the first at STAGE): ..." for a free-running
// candidate whose diverged tokens were judged apart (diff/divergence.h); "" otherwise.
std::string divergence_note(const CompareResult& r);
// A generation run in steps (diff/step_errors.h): "schedule step 7/19 (decode, position 31) is
// the first where a failing tensor passes its bound: L03.attn.core/o (9.1x ...)", or the worst
// step; "" for a prefill run.
std::string step_note(const CompareResult& r);
// Where a schedule step lies: "decode, position 31" or "prefill chunk, positions 0..4".
std::string step_where(const ScheduleStep& st);
// run --p-vs-d: "19 steps against its own prefill: lm_head/logits bit-identical over 34
// predicting rows" or how they differ; "" without it.
std::string p_vs_d_note(const CompareResult& r);

// "L03" for layer stages, otherwise "prologue" or "head" (the stage's part, stage_part).
std::string group_name(const std::string& stage);

// fmt spec applied to finite values; "nan", "inf", "-inf" otherwise.
std::string num(double v, const char* spec = "{:.3g}");
std::string cosine_text(double c);  // 7 decimals; "1" when exactly 1, "1-2.0e-09" when closer
std::string html_escape(const std::string& s);
// The "Environment" section of an HTML page: one row per record entry; a multi-line value
// (policy_stages: one line per stage) in a <pre> that keeps its lines.
std::string env_section(const std::vector<std::pair<std::string, std::string>>& env);
// XML text and attribute values; drops the control characters XML 1.0 forbids even escaped.
std::string xml_escape(const std::string& s);

}  // namespace tdiff::report
