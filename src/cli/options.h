#pragma once
// The flags of the option groups several commands share (app/candidate.h, app/report_options.h,
// app/weight_check.h): one declaration each, so every command spells them alike.
#include <string>

#include <CLI/CLI.hpp>

#include "app/candidate.h"
#include "app/history_record.h"
#include "app/report_options.h"
#include "app/weight_check.h"

namespace tdiff::cli {

// --backend, --policy, --set, --seed, --model, --hip-gemm.
void add_options(CLI::App* cmd, app::CandidateOptions& o);
// --candidate-cmd (after add_options: it excludes --backend and --hip-gemm).
void add_candidate_cmd_option(CLI::App* cmd, app::CandidateOptions& o);
// --thresholds, --threshold, -o, --run-id, --all, --no-reports.
void add_options(CLI::App* cmd, app::ReportOptions& o);
// --force, --verify-weights.
void add_options(CLI::App* cmd, app::WeightCheckOptions& o);
// --history, --label, --no-record (the run history: app/history_record.h).
void add_options(CLI::App* cmd, app::HistoryOptions& o);
// --verify-case: how the integrity record of every case file the command reads is checked
// (casefile/h5_common.h CaseCheck).
void add_verify_case_option(CLI::App* cmd);
// --backend with the registry's names (and refcpu when `with_reference`).
void add_backend_option(CLI::App* cmd, std::string& backend, bool with_reference);
// --hip-gemm.
void add_hip_gemm_option(CLI::App* cmd, std::string& hip_gemm);
// --tp, --ep, --allreduce, --moe-reduce, --channels: the split (numerics/policy.h Split), each
// added to `sets` as "tp=4", so reproduce lines and saved runs carry it as they carry --set.
void add_split_options(CLI::App* cmd, std::vector<std::string>& sets);

}  // namespace tdiff::cli
