#pragma once
// Reports of a bisection (bisect/bisect.h): the terminal summary, bisect.html (the search
// trace, the culprits, the isolation ranking and the attribution table), bisect.json and
// CSV files (trace.csv, isolation.csv, attribution.csv). The all-candidate run's per-stage
// comparison goes to the usual report files (report.h) beside them.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bisect/bisect.h"
#include "report/report.h"

namespace tdiff {

struct BisectReport {
  RunInfo info;             // case, run id, title, command, environment
  std::string mode;         // "search" | "isolate"
  std::string candidate;    // "emu under fixed + L02.attn.core:qk_accum=fp16"
  std::string floor;        // "emu under fixed", or "" without a floor
  std::string rest = "the reference";  // what ran the stages after a split: or "the floor" (Suffix::floor)
  Watch watch;
  std::size_t stages = 0;   // N: the stages up to the watched one
  // A generation case bisected in its steps against the cache (exec/step_run.h): each culprit
  // gets the step at which it moves the watched tensor first (beyond floor_k) or most
  // (diff/step_errors.h). Else empty.
  std::vector<ScheduleStep> steps;
  Thresholds watch_thresholds;  // as they apply to the watched tensor
  std::vector<Probe> trace;
  std::optional<SearchResult> search;
  std::optional<IsolationResult> isolation;
  std::optional<AttributionResult> attribution;
  // A search that found nothing: the isolation ranking against the floor, so the run still
  // points at the stages most worth a look, and the command to run next.
  std::optional<IsolationResult> leads;
  std::string next_command, next_reason;
  // The all-candidate run's first FAIL tensor ("stage/tensor", "" if none): what `tdiff run`
  // calls the first divergence, which need not be the first culprit (divergence_story).
  std::string run_first_fail;
  std::size_t run_first_fail_index = 0;  // its stage's index in the model
  BisectTotals totals;
  std::vector<std::string> notes;
  bool has_run_report = false;  // report.html of the all-candidate run sits beside bisect.html

  std::string outcome() const;  // one line: the culprits, or "nothing crosses the threshold"
  int exit_code() const;        // 0 nothing found, 1 a culprit (or an isolated stage FAILs)
};

// The rule the watched tensor is judged by, in one sentence.
std::string watch_rule(const BisectReport& r);
std::string grouping_name(Grouping g);  // "operator class" | "operator kind"

// Why the run's first divergence and the first culprit differ (empty when they agree): a
// tensor can cross its own thresholds without moving the watched output beyond the floor,
// and a stage within its own thresholds can start the error that later makes it fail.
std::vector<std::string> divergence_story(const BisectReport& r);

void print_bisect_terminal(std::FILE* out, const BisectReport& r, bool color = false);
// The same in pieces, so the trace can be printed while the search runs: the head (with the
// trace's column header once the first probe is in r.trace), one row per probe, the notes
// added since `from`, and the rest (culprits, rankings, result, totals).
void print_bisect_head(std::FILE* out, const BisectReport& r);
void print_trace_row(std::FILE* out, const BisectReport& r, const Probe& p, bool color = false);
void print_bisect_notes(std::FILE* out, const BisectReport& r, std::size_t from);
void print_bisect_body(std::FILE* out, const BisectReport& r, bool color = false);
std::string render_bisect_html(const BisectReport& r);
std::string render_bisect_json(const BisectReport& r);
// step,phase,prefix,pinned,group,split,tensor,error,companion_error,floor_error,ratio,cosine,max_abs,max_abs_scaled,
// verdict,reason,computed,reused,cached,seconds
std::string render_trace_csv(const BisectReport& r);
std::string render_isolation_csv(const IsolationResult& r);
std::string render_attribution_csv(const AttributionResult& r);
// Writes bisect.html, bisect.json, trace.csv and, when present, isolation.csv and
// attribution.csv into `dir`; returns the paths written.
std::vector<std::string> write_bisect_reports(const std::string& dir, const BisectReport& r);

}  // namespace tdiff
