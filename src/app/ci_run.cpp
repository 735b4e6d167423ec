// One case of `tdiff ci` (app/ci_suite.h): accuracy against /reference, then determinism; or
// an external implementation's dump of it judged.
#include <chrono>

#include <fmt/format.h>

#include "app/ci_suite.h"
#include "app/speed.h"
#include "exec/timed_forward.h"
#include "exec/followed_reference.h"
#include "exec/measured_floor.h"
#include "exec/mixed_run.h"
#include "casefile/session.h"
#include "diff/expected.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

CiCaseResult run_ci_case(const Suite& suite, const SuiteCase& c, const std::string& case_file, const CiOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  CiCaseResult r;
  r.name = c.name;
  r.case_file = case_file;
  CaseSession session = open_session(case_file);
  opt.policy.validate(session.stages);
  r.rows = session.info.batch.rows();
  r.seq = session.info.batch.seq();
  r.pad_side = session.info.pad_side;
  for (auto len : session.info.batch.length) r.padded = r.padded || len < r.seq;
  r.schedule = session.info.schedule.describe(r.seq);
  r.runs = suite.repeat;

  // Run 1: every stage on the candidate, compared with the reference as it goes.
  refcpu::RefCpuBackend reference;
  TensorMap run1;
  MixedRunOptions mo;
  mo.replay_selections = suite.replay_selections;
  mo.follow_selections = true;  // free: judged on its own path, as `tdiff run --selections free`
  // Free, run 1 is also the determinism check's first run (kept); replayed, its later stages
  // read the reference's choices, so the determinism runs make their own first run.
  const bool keep_run1 = !suite.replay_selections && suite.repeat > 1;
  LogitsHash compared_logits(mo.diff.logits_patterns);  // what timed forwards must reproduce
  if (keep_run1 || opt.timed > 0)
    mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) {
      if (opt.timed > 0) compared_logits.add(s, out);
      if (keep_run1)
        for (std::size_t k = 0; k < out.size(); ++k) run1[s.name + "/" + s.outputs[k]] = out[k];
    };
  mo.progress = [&](const Stage& s, std::size_t i) {
    if (opt.progress) opt.progress(s, i, 1);
  };
  RunContext ctx = session.context();
  auto candidate = opt.make(c.seed);
  MixedRunResult m = run_mixed(session, *candidate, reference, std::vector<bool>(session.stages.size(), true), ctx, mo);
  if (opt.measured_floor) (void)attach_measured_floor(session, opt.policy, mo, m.diff);
  judge(m.diff, opt.thresholds);
  r.diff = std::move(m.diff);
  r.verdict = r.diff.verdict;
  if (opt.timed > 0)
    r.speed = app::measure_speed(session, *candidate, suite.replay_selections, opt.timed, compared_logits.hex(), r.diff,
                            opt.thresholds);
  if (r.diff.first_fail >= 0) {
    const TensorDiff& d = r.diff.rows[static_cast<std::size_t>(r.diff.first_fail)];
    r.reason = fmt::format("{}: {}", d.key(), d.reason);
  }

  // Runs 2..repeat: the same case with other run seeds, bit for bit against run 1.
  if (suite.repeat > 1) {
    DeterminismOptions d;
    d.runs = suite.repeat;
    d.seed = c.seed;
    if (!suite.replay_selections) d.run1 = &run1;
    d.progress = [&](const RunSpec& spec, const Stage& s, std::size_t i) {
      if (opt.progress) opt.progress(s, i, spec.number);
    };
    DeterminismResult det = check_determinism(session, opt.make, d);
    for (const auto& f : det.findings) r.nondeterministic.push_back(f.key());
    if (!det.deterministic()) {
      const Finding& f = det.findings.front();
      r.determinism_note = fmt::format("{} tensors differ between runs; first {} ({}: max |diff| {:.3g} in {} of {} elements)",
                                       det.findings.size(), f.key(), f.worst, f.max_abs, f.differing, f.numel);
      r.verdict = Verdict::fail;
      r.reason = r.reason.empty() ? "nondeterministic: " + r.determinism_note
                                  : r.reason + "; nondeterministic: " + r.determinism_note;
    }
    r.determinism = std::move(det.table);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

CiCaseResult judge_ci_dump(const SuiteCase& c, const std::string& case_file, const CandidateDump& dump,
                           const Policy* dump_policy, const ThresholdPolicy& thresholds, bool measured_floor) {
  const auto t0 = std::chrono::steady_clock::now();
  CiCaseResult r;
  r.name = c.name;
  r.case_file = case_file;
  CaseSession session = open_session(case_file);
  r.rows = session.info.batch.rows();
  r.seq = session.info.batch.seq();
  r.pad_side = session.info.pad_side;
  for (auto len : session.info.batch.length) r.padded = r.padded || len < r.seq;
  r.schedule = session.info.schedule.describe(r.seq);
  r.runs = 1;
  std::string selections;  // how they were judged: the report's reason says what matters
  r.diff = compare_dump(case_file, &session, session.stages, dump, {}, selections);
  if (dump_policy) {
    dump_policy->validate(session.stages);
    set_expected(r.diff, {&session, dump_policy, dump.mode == "isolated" ? StageInputs::reference : StageInputs::run});
    if (measured_floor && dump.mode != "isolated") {  // as `tdiff run --candidate-dump` judges it
      MixedRunOptions mo;
      (void)attach_measured_floor(session, *dump_policy, mo, r.diff);
    }
  }
  judge(r.diff, thresholds);
  r.verdict = r.diff.verdict;
  // Isolated, every stage's error is its own: the worst one says more than the first in order.
  const std::vector<const TensorDiff*> ranked = rank_by_local_error(r.diff);
  if (dump.mode == "isolated" && !ranked.empty() && ranked.front()->verdict != Verdict::pass)
    r.reason = fmt::format("ranked first by local error: {} ({:.3g}, {})", ranked.front()->key(), local_error(*ranked.front()),
                           verdict_name(ranked.front()->verdict));
  else if (r.diff.first_fail >= 0) {
    const TensorDiff& d = r.diff.rows[static_cast<std::size_t>(r.diff.first_fail)];
    r.reason = fmt::format("{}: {}", d.key(), d.reason);
  }
  if (!r.diff.only_ref.empty()) {
    const std::string lacks =
        dump.lacking_stages.empty()
            ? fmt::format("the dump lacks {} tensor{} with a reference (first {})", r.diff.only_ref.size(),
                          r.diff.only_ref.size() == 1 ? "" : "s", r.diff.only_ref.front())
            : fmt::format("the dump lacks {} stage{} with a reference (first {}; {} tensors in all)", dump.lacking_stages.size(),
                          dump.lacking_stages.size() == 1 ? "" : "s", dump.lacking_stages.front(), r.diff.only_ref.size());
    r.reason = r.reason.empty() ? lacks : r.reason + "; " + lacks;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

const TensorDiff* logits_row(const CompareResult& r) {
  for (const auto& d : r.rows)
    if (d.logits) return &d;
  return nullptr;
}

}  // namespace tdiff
