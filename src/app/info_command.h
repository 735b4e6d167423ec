#pragma once
// tdiff info: what a case file or a model folder holds, the stage list, the fault catalog and
// the operator table.
#include <cstdint>
#include <string>
#include <vector>

#include "app/candidate.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::app {

struct InfoOptions {
  std::string case_path;
  std::string model;
  std::string stages;  // glob; empty: no stage list
  bool knobs = false;
  bool ops = false;
  bool dump_format = false;
  bool json = false;  // with a case: the tensor contract of the --stages as JSON (model/tensor_contract.h)
  std::size_t runs = 5;  // the newest environment records, saved runs and history runs shown; 0: all
  std::string history;   // --history: the run history to read (default: beside the case)
};

// The fault catalog (a Markdown table).
void print_knobs();
// The operator table with its coverage.
void print_ops();
// Every tensor a dump may hold, one row per stage output of the model with the layer folded
// (Lxx): its axes, the dtypes a dump may store it in, its operator kind and the layer types
// that have it (a Markdown table: docs/reference/dump-format.md is this output).
void print_dump_format();
// A model folder: its config, weights and, with --stages, the stage list.
void info_model(const InfoOptions& o);
// A case file: its inputs, model, reference and recorded runs; with `json`, only the tensor
// contract of its stages (every tensor a reference or a dump holds: name, shape, dtype, axes).
void info_case(const InfoOptions& o);

}  // namespace tdiff::app
