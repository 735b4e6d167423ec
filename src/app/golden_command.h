#pragma once
// tdiff golden: the float64 reference into the case (app/case_workflows.h), or --verify: how far
// this build is from a stored reference.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct GoldenOptions {
  std::string case_path;
  std::string model_dir;
  std::string stages;
  // "all": every stage's outputs; "boundaries": the layer boundaries, final.*, lm_head and the
  // selections (plus `stages`), the layers' other stages recomputed when read.
  std::string store = "all";
  std::string tie_rule = "lowest-index";
  bool verify = false;
  double tolerance = 1e-12;
  int conditioning_probes = 4;  // exec/conditioning.h kConditioningProbes
  WeightCheckOptions weights;
};

// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int verify_golden(const GoldenOptions& o);
// The command's work; returns its exit code (0 pass, 1 a FAIL verdict).
int run_golden(const GoldenOptions& o);

}  // namespace tdiff::app
