// tdiff compare: diff any two HDF5 dumps whose dataset names match, with verdicts and reports.
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/envelope.h"
#include "cli/command.h"
#include "cli/shell.h"
#include "model/config.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "casefile/h5io.h"
#include "formats/safetensors.h"
#include "model/stage_graph.h"
#include "diff/compare.h"
#include "exec/saved_run.h"
#include "diff/thresholds.h"
#include "report/report.h"
#include "base/sha256.h"

namespace tdiff::cli {

namespace {

struct CompareCmd {
  std::string file_a, file_b;
  std::string group_a, group_b;  // empty: "/reference" when the file has it, else "/"
  std::string stages;
  std::string thresholds;
  std::vector<std::string> overrides;
  std::string floor_file, floor_group;
  std::optional<double> floor_k;
  std::optional<double> rel_floor;
  std::string out_dir, case_name, run_id;
  bool all_rows = false, no_reports = false;
};

std::string default_group(const std::string& file) {
  return h5_exists(file, "/reference") ? "/reference" : "/";
}

// Model order from the case file's model config; empty when neither file has one.
std::vector<std::string> stage_order_of(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    try {
      const auto attrs = h5_read_attrs(f, "/");
      auto it = attrs.find("model_config");
      if (it == attrs.end()) continue;
      std::vector<std::string> names;
      for (const auto& s : build_stages(parse_config(nlohmann::json::parse(it->second), f + ":/model_config")))
        names.push_back(s.name);
      return names;
    } catch (const std::exception&) {
      // Not a case file, or an unreadable config: fall back to the order by name.
    }
  }
  return {};
}

// The weight checksums a case file records ("sha256:<file>" root attributes); none in other dumps.
std::map<std::string, std::string> recorded_weight_sha256(const std::string& file) {
  std::map<std::string, std::string> out;
  const std::string prefix = "sha256:";
  for (const auto& [k, v] : h5_read_attrs(file, "/"))
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

EnvRecord compare_env(const CompareCmd& c) {
  EnvRecord env = capture_env("compare", c.thresholds.empty() ? "default thresholds" : c.thresholds);
  add_case_facts(env, c.file_a, recorded_weight_sha256(c.file_a));
  env.extra["candidate_sha256"] = std::filesystem::equivalent(c.file_a, c.file_b) ? env.extra["case_sha256"] : file_sha256(c.file_b);
  return env;
}

// The command that reproduces this comparison, every default spelled out.
std::string reproduce_command(const CompareCmd& c) {
  std::string s = fmt::format("tdiff compare {} {} --group-a {} --group-b {}", shell_quote(absolute_path(c.file_a)),
                              shell_quote(absolute_path(c.file_b)), shell_quote(c.group_a), shell_quote(c.group_b));
  if (!c.stages.empty()) s += " --stages " + shell_quote(c.stages);
  if (!c.thresholds.empty()) s += " --thresholds " + shell_quote(absolute_path(c.thresholds));
  for (const auto& o : c.overrides) s += " --threshold " + shell_quote(o);
  if (!c.floor_file.empty()) s += fmt::format(" --floor {} --group-floor {}", shell_quote(absolute_path(c.floor_file)), shell_quote(c.floor_group));
  if (c.floor_k) s += fmt::format(" --floor-k {}", *c.floor_k);
  if (c.rel_floor) s += fmt::format(" --rel-floor {}", *c.rel_floor);
  return s;
}

void run_compare(CompareCmd c) {
  for (const auto* f : {&c.file_a, &c.file_b})
    if (!std::filesystem::is_regular_file(*f)) input_error("file not found: {}", *f);
  if (c.group_a.empty()) c.group_a = default_group(c.file_a);
  if (c.group_b.empty()) c.group_b = default_group(c.file_b);

  ThresholdPolicy policy = c.thresholds.empty() ? ThresholdPolicy{} : load_thresholds(c.thresholds);
  for (const auto& o : c.overrides) add_threshold_override(policy, o);
  if (c.floor_k) add_threshold_override(policy, fmt::format("floor_k={}", *c.floor_k));

  CompareOptions opt;
  opt.stages = c.stages;
  opt.stage_order = stage_order_of({c.file_a, c.file_b});
  if (c.rel_floor) opt.metrics.rel_floor = *c.rel_floor;
  // Tensors a run saved (tdiff run --save) against its case: paired stage by stage and judged as
  // that run judged them (its selection mode, its policy's expected errors, the routing bias).
  const std::optional<SavedRun> saved = read_saved_run(c.file_b, c.group_b);
  const std::optional<std::vector<Stage>> stages = saved ? case_stages(c.file_a) : std::nullopt;
  std::optional<CaseSession> session;
  if (stages) {
    try {
      session.emplace(open_session(c.file_a));
    } catch (const InputError& e) {
      fmt::print("note: without the model ({}), no expected errors and no routing bias: judged by the scaled rule\n",
                 e.what());
    }
  }
  auto compare = [&](const std::string& file, const std::string& group) {
    const std::optional<SavedRun> run = read_saved_run(file, group);
    if (stages && run)
      return compare_saved_run(c.file_a, c.group_a, file, group, *stages, *run, session ? &*session : nullptr, opt);
    return compare_files(c.file_a, c.group_a, file, group, opt);
  };
  CompareResult result = compare(c.file_b, c.group_b);

  // Rules are checked against every tensor of both dumps, not only the --stages selection,
  // so that one thresholds file serves runs restricted to a few stages.
  std::vector<std::string> keys = list_keys(c.file_a, c.group_a);
  for (auto& k : list_keys(c.file_b, c.group_b)) keys.push_back(std::move(k));
  policy.check_patterns(keys);

  std::optional<CompareResult> floor;
  if (!c.floor_file.empty()) {
    if (!std::filesystem::is_regular_file(c.floor_file)) input_error("noise-floor file not found: {}", c.floor_file);
    if (c.floor_group.empty()) c.floor_group = default_group(c.floor_file);
    floor = compare(c.floor_file, c.floor_group);
  }
  judge(result, policy, floor ? &*floor : nullptr);

  RunInfo info;
  info.case_name = c.case_name.empty() ? std::filesystem::path(c.file_a).stem().string() : c.case_name;
  info.run_id = app::run_id_for(c.run_id, "compare");
  info.title = fmt::format("tdiff compare {} vs {}", std::filesystem::path(c.file_a).filename().string(),
                           std::filesystem::path(c.file_b).filename().string());
  info.command = reproduce_command(c);
  for (const auto& [k, v] : compare_env(c).to_attrs()) info.env.emplace_back(k, v);

  TerminalOptions topt;
  topt.color = want_color(stdout);
  topt.all_rows = c.all_rows;
  print_terminal(stdout, result, info, topt);
  if (!c.no_reports) {
    const std::string dir = report_dir(info, c.out_dir);
    write_reports(dir, result, info);
    fmt::print("reports     {}/report.html (and report.csv, report.json, junit.xml)\n", dir);
  }
  exit_code() = result.verdict == Verdict::fail ? 1 : 0;
}

}  // namespace

void setup_compare(CLI::App& app) {
  auto c = std::make_shared<CompareCmd>();
  auto* sub = app.add_subcommand("compare", "Diff two HDF5 dumps tensor by tensor; verdicts and reports");
  sub->footer(
      "Datasets are paired by their path under each group (\"<stage>/<tensor>\"); those on one side only are\n"
      "listed; a pair of other shapes (beyond size-1 dimensions) is one FAIL row. /runs/<run-id> holds the\n"
      "candidate's tensors of `tdiff run --save --run-id <run-id>`.\n"
      "Exit code: 0 all pass (warnings allowed), 1 any FAIL, 2 usage or input error.\n\n"
      "Examples:\n"
      "  tdiff compare case.h5 dump.h5                       # case /reference vs the dump's root\n"
      "  tdiff compare a.h5 b.h5 --group-a /reference --group-b /runs/r1 --stages 'L0[2-4].attn.*'\n"
      "  tdiff compare case.h5 fp16.h5 --floor fp32.h5 --floor-k 3 -o out/\n"
      "  tdiff compare case.h5 dump.h5 --thresholds th.toml --threshold 'lm_head:max_abs_fail=0.5'");
  sub->add_option("A", c->file_a, "reference dump (HDF5)")->required();
  sub->add_option("B", c->file_b, "candidate dump (HDF5)")->required();
  sub->add_option("--group-a", c->group_a, "group of A to compare (default: /reference if present, else /)");
  sub->add_option("--group-b", c->group_b, "group of B to compare (default: /reference if present, else /)");
  sub->add_option("--stages", c->stages, "only stages matching this glob, e.g. 'L0[2-4].attn.*'");
  sub->add_option("--thresholds", c->thresholds, "thresholds file (TOML: [default] and [[rule]] stages = glob)");
  sub->add_option("--threshold", c->overrides, "override 'KEY=VALUE' or 'GLOB:KEY=VALUE[,KEY=VALUE]' (repeatable)");
  sub->add_option("--floor", c->floor_file, "noise-floor dump: FAIL where B's rmse exceeds k x the floor's");
  sub->add_option("--group-floor", c->floor_group, "group of the noise-floor dump");
  sub->add_option("--floor-k", c->floor_k, "noise-floor factor k (default 3)");
  sub->add_option("--rel-floor", c->rel_floor, "denominator floor of max_rel (default 1e-3)");
  sub->add_option("-o,--out", c->out_dir, "report folder (default reports/<case>/<run-id>)");
  sub->add_option("--case", c->case_name, "case name for the report folder (default: A's file name)");
  sub->add_option("--run-id", c->run_id, "run id for the report folder (default: time-based)");
  sub->add_flag("--all", c->all_rows, "print every tensor, not only WARN/FAIL, for large runs");
  sub->add_flag("--no-reports", c->no_reports, "print the table only; write no report files");
  sub->callback([c] { run_compare(*c); });
}

}  // namespace tdiff::cli
