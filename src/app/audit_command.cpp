#include "app/audit_command.h"

// setting (checks/audit.h), on emu or on hip.
#include <filesystem>

#include <fmt/format.h>

#include "checks/audit.h"
#include "app/envelope.h"
#include "app/candidate.h"
#include "app/progress.h"
#include "app/shell.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "exec/backend_registry.h"
#include "report/audit_report.h"

namespace tdiff::app {

namespace {

}  // namespace

// "emu", "hip (--hip-gemm vector)": the candidate the audit ran on, for its title.
std::string candidate_text(const CandidateOptions& cand) {
  return cand.backend == "hip" ? fmt::format("hip (--hip-gemm {})", cand.hip_gemm) : cand.backend;
}

int run_audit_cmd(AuditCmd c) {
  if (!backend_entry(c.cand.backend).every_knob)
    input_error("audit: backend '{}' does not implement every knob of the catalogue (emu does)", c.cand.backend);
  CaseSession session = open_session(c.case_path, c.cand.model_dir);
  if (session.reference().stages().empty())
    input_error("{}: no reference stored (run `tdiff golden {}` first)", c.case_path, c.case_path);
  const Policy base = c.cand.make_policy(session);
  AuditOptions opt;
  opt.knobs = c.knobs;
  for (const auto& k : opt.knobs) knob_info(k);  // unknown names fail before any work
  opt.full_runs = !c.no_full;
  const std::string run_id = app::run_id_for(c.run_id, "audit");
  opt.seed_a = app::run_seed_for(c.cand.seed, run_id);
  opt.seed_b = c.seed_b == 0 ? opt.seed_a + 1 : c.seed_b;
  if (opt.seed_b == opt.seed_a) input_error("audit: --seed and --seed-b must differ (run-to-run needs two seeds)");
  // The environment record of the candidate the audit runs, from one made before any work:
  // a missing device, or --hip-gemm on emu, fails here.
  EnvRecord env = candidate_env(c.cand.backend, base, session.stages,
                                make_candidate(c.cand.backend, base, opt.seed_a, c.cand.hip_gemm).get(), c.cand.hip_gemm);
  add_run_facts(env, c.case_path, session.info.checksums, opt.seed_a);
  StatusLine status("audit");
  opt.progress = [&](const std::string& what) { status.show(what); };
  const CandidateFactory candidates = [&](const Policy& p, std::uint64_t seed) {
    return make_candidate(c.cand.backend, p, seed, c.cand.hip_gemm);
  };
  const AuditResult r = run_audit(session, base, candidates, opt);
  status.clear();

  RunInfo info;
  info.case_name = std::filesystem::path(c.case_path).stem().string();
  info.run_id = run_id;
  info.title = fmt::format("tdiff audit {}: {}, seeds {} and {}", std::filesystem::path(c.case_path).filename().string(),
                           candidate_text(c.cand), opt.seed_a, opt.seed_b);
  c.cand.seed = opt.seed_a;
  info.command = fmt::format("tdiff audit {}{} --seed-b {}", shell_quote(absolute_path(c.case_path)), c.cand.flags(),
                             opt.seed_b);
  for (const auto& k : c.knobs) info.command += " --knob " + k;
  if (c.no_full) info.command += " --no-full-runs";
  show_env(env, info);
  print_audit(stdout, r, info);
  if (c.no_reports) return 0;
  const std::string dir = report_dir(info, c.out_dir);
  write_audit_reports(dir, r, info);
  fmt::print("reports     {}/audit.html (and audit.csv, audit.json)\n", dir);
  return 0;
}

}  // namespace tdiff::app
