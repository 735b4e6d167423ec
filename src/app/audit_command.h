#pragma once
// tdiff audit: the precision audit (checks/audit.h) of every catalog knob on the case, on emu or
// hip, with its reports.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct AuditCmd {
  std::string case_path;
  CandidateOptions cand;
  std::vector<std::string> knobs;
  std::uint64_t seed_b = 0;
  bool no_full = false, no_reports = false;
  std::string out_dir, run_id;
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_audit_cmd(AuditCmd c);

}  // namespace tdiff::app
