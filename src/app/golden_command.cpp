#include "app/golden_command.h"

#include <algorithm>
#include <chrono>

#include "app/case_workflows.h"
#include "app/progress.h"
#include "app/weight_check.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "backend/executor.h"
#include "model/pattern.h"
#include "casefile/h5io.h"
#include "casefile/reference_layers.h"
#include "casefile/session.h"
#include "checks/reference_check.h"
#include "refcpu/linear.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::app {

namespace {

// A golden of some stages keeps the stored stages it does not recompute. Kept beside stages of
// another tie rule or other weights they would make one reference of two: then they are
// dropped, which takes --force (a real-width reference costs minutes and tens of GB).
bool keep_other_stages(const GoldenOptions& o, const WeightCheck& checked) {
  if (o.stages.empty()) return true;  // every stage recomputed: nothing to keep or drop
  std::size_t others = 0;
  for (const auto& stage : reference_stages(o.case_path)) others += !pattern_matches(o.stages, stage);
  if (!others) return true;
  const auto attrs = h5_read_attrs(o.case_path, "/reference");
  const auto tie = attrs.find("tie_rule");
  std::string why;
  if (tie != attrs.end() && tie->second != o.tie_rule)
    why = fmt::format("stored under tie rule {}, recomputed under {}", tie->second, o.tie_rule);
  else if (!checked.changed.empty())
    why = "stored from the weights the case recorded, which changed";
  if (why.empty()) return true;
  if (!o.weights.force)
    input_error("{}: golden --stages '{}' would drop the {} stored stages it does not recompute ({}); pass --force to "
                "keep only the recomputed ones, or run golden without --stages",
                o.case_path, o.stages, others, why);
  fmt::print(stderr, "tdiff: warning: {}: dropping the {} stored stages golden does not recompute ({}; --force)\n",
             o.case_path, others, why);
  return false;
}

}  // namespace

// --verify: recompute every stage from the stored inputs and report how far this build's
// reference is from the stored one; the case is not changed. Exit 1 beyond the tolerance.
int verify_golden(const GoldenOptions& o) {
  CaseSession session = open_session(o.case_path, o.model_dir);
  o.weights.check(session);
  if (reference_stages(o.case_path).empty())
    input_error("{}: no reference to verify (run `tdiff golden {}` first)", o.case_path, o.case_path);
  const auto attrs = h5_read_attrs(o.case_path, "/reference");
  const auto tie = attrs.find("tie_rule");
  const TieRule rule = parse_tie_rule(tie != attrs.end() ? tie->second : o.tie_rule);
  Progress progress("golden --verify", session.stages.size());
  const auto t0 = std::chrono::steady_clock::now();
  auto diffs = check_reference(session, rule, [&](std::size_t i, const Stage& s) { progress.step(i + 1, s.name); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Differing tensors first: integers (which must agree exactly), then floats by relative L2.
  std::stable_sort(diffs.begin(), diffs.end(), [](const ReferenceDiff& a, const ReferenceDiff& b) {
    if (a.bits.identical() != b.bits.identical()) return b.bits.identical();
    if (a.integer != b.integer) return a.integer;
    return a.rel_l2 > b.rel_l2;
  });
  std::size_t identical = 0, beyond = 0;
  for (const auto& d : diffs) {
    identical += d.bits.identical();
    beyond += d.integer ? !d.bits.identical() : !(d.rel_l2 <= o.tolerance);
  }
  progress.finish(fmt::format("golden --verify: {} tensors of {} stages recomputed on the stored inputs in {:.2f} s: "
                              "{} bit-identical, {} beyond the tolerance (relative L2 {:.0e}; integers exactly)",
                              diffs.size(), session.stages.size(), secs, identical, beyond, o.tolerance));
  fmt::print("{:<40} {:>12} {:>12} {:>24}\n", "stage/tensor", "rel L2", "max |diff|", "differing elements");
  for (std::size_t i = 0; i < diffs.size() && i < 12; ++i) {
    const auto& d = diffs[i];
    if (d.bits.identical()) break;
    fmt::print("{:<40} {:>12} {:>12.3g} {:>24}\n", d.stage + "/" + d.tensor, d.integer ? "-" : fmt::format("{:.3g}", d.rel_l2),
               d.bits.max_abs, fmt::format("{} of {}", d.bits.differing, d.bits.numel));
  }
  return beyond ? 1 : 0;
}

int run_golden(const GoldenOptions& o) {
  CaseSession session = open_session(o.case_path, o.model_dir);
  if (!o.stages.empty()) select_stages(o.stages, session.stages);  // an unknown pattern is an input error
  const WeightCheck checked = o.weights.check(session);  // a reference of another model is worse than none
  Progress progress("golden", session.stages.size());
  app::ReferenceRequest request;
  request.stages = o.stages;
  request.boundaries = o.store == kStoreBoundaries;
  request.keep_others = request.boundaries ? false : keep_other_stages(o, checked);
  request.tie_rule = parse_tie_rule(o.tie_rule);
  request.conditioning_probes = o.conditioning_probes;
  request.progress = [&](std::size_t i, const Stage& s) { progress.step(i + 1, s.name); };
  request.weights_note = o.weights.note(checked);
  request.before_commit = [&](CaseUpdate& update) {
    WeightCheckOptions::refresh(update, checked);
    if (checked.changed.empty()) return;
    // --force: the new reference is of these weights, so the case now records them (else a
    // later run on the old weights would pass the check against a reference of the new ones).
    CaseInfo now;
    record_weight_files(now, session.weights->files().files());
    update.put_weight_records(now);
  };
  const app::ReferenceWritten written = app::write_reference(session, request);
  const std::string boundaries =
      request.boundaries ? fmt::format("; store boundaries: {} of {} stages stored, the layers' other stages "
                                       "recomputed from them when read",
                                       written.stored_stages, written.stages)
                         : "";
  progress.finish(fmt::format("golden: {} stages computed in {:.2f} s ({:.2f} s of them probing the conditioning of {} "
                              "tensors), {} tensors stored under /reference of {}{}{}",
                              written.stages, written.seconds, written.conditioning_seconds, written.conditioned,
                              written.tensors, o.case_path,
                              written.kept ? fmt::format(" ({} stored stages kept)", written.kept) : "", boundaries));
  return 0;
}

}  // namespace tdiff::app
