#include "app/compare_command.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/envelope.h"
#include "app/report_options.h"
#include "app/shell.h"
#include "model/config.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "formats/safetensors.h"
#include "model/stage_graph.h"
#include "diff/compare.h"
#include "exec/candidate_dump.h"
#include "exec/saved_run.h"
#include "diff/thresholds.h"
#include "report/report.h"
#include "base/sha256.h"

namespace tdiff::app {

namespace {

std::string default_group(const std::string& file) {
  return h5_exists(file, "/reference") ? "/reference" : "/";
}

// The stages of the model of the first file with a model config (a case file); none when neither has one.
std::optional<std::vector<Stage>> known_stages(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    try {
      if (auto stages = case_stages(f)) return stages;
    } catch (const std::exception&) {
      // Not a case file, or an unreadable config: fall back to the order by name.
    }
  }
  return std::nullopt;
}

std::vector<std::string> stage_order_of(const std::optional<std::vector<Stage>>& stages) {
  std::vector<std::string> names;
  if (stages)
    for (const auto& s : *stages) names.push_back(s.name);
  return names;
}

// The contract of a case's /reference, whose axes slice its tensors for the systematic fits
// (diff/systematic.h); nothing for another file or group.
std::optional<TensorContract> reference_contract(const std::string& file, const std::string& group) {
  if (group != "/reference" && group != "/reference/") return std::nullopt;
  try {
    const std::optional<std::vector<Stage>> stages = case_stages(file);
    if (!stages) return std::nullopt;
    const CaseInfo info = read_case(file);
    return TensorContract(*stages, info.config, info.batch.rows(), info.batch.seq());
  } catch (const InputError&) {
    return std::nullopt;  // not a case: the dumps are compared by name alone
  }
}

// Locations in the model's terms from the first of `files` that is a case (model and inputs);
// null when neither is one (two plain dumps: plain dimensions).
std::shared_ptr<const Locator> case_locator(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    if (!h5_exists(f, "/inputs/ids")) continue;
    try {
      const CaseInfo info = read_case(f);
      return std::make_shared<const Locator>(build_stages(info.config), info.config, info.batch);
    } catch (const InputError&) {
      // Not a readable case: the next file, or plain dimensions.
    }
  }
  return nullptr;
}

// The weight checksums a case file records ("sha256:<file>" root attributes); none in other dumps.
std::map<std::string, std::string> recorded_weight_sha256(const std::string& file) {
  std::map<std::string, std::string> out;
  const std::string prefix = "sha256:";
  for (const auto& [k, v] : h5_read_attrs(file, "/"))
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

// What a file says about the case it belongs to: a case file's model config, recorded weight
// checksums and token ids. None for a file without a model_config (a plain dump).
struct CaseFacts {
  std::string file;
  nlohmann::json config;
  std::map<std::string, std::string> weights;
  Tensor ids;  // undefined: not recorded
};

std::optional<CaseFacts> case_facts(const std::string& file) {
  const auto attrs = h5_read_attrs(file, "/");
  const auto it = attrs.find("model_config");
  if (it == attrs.end()) return std::nullopt;
  CaseFacts f{file, parse_config_json(it->second, file + ":/model_config"), recorded_weight_sha256(file), {}};
  if (h5_exists(file, "/inputs/ids")) f.ids = h5_read(file, "/inputs/ids");
  return f;
}

// The facts of the case a noise-floor dump was made on: the file's own (a case file), else those
// of the case its group names (`run --save-to` records it as the "case" attribute), when that
// case is still there to read.
std::optional<CaseFacts> floor_facts(const std::string& file, const std::string& group) {
  if (auto f = case_facts(file)) return f;
  if (!h5_exists(file, group)) return std::nullopt;
  const auto attrs = h5_read_attrs(file, group);
  const auto it = attrs.find("case");
  if (it == attrs.end() || !std::filesystem::is_regular_file(it->second)) return std::nullopt;
  try {
    return case_facts(it->second);
  } catch (const InputError&) {  // moved or replaced since: the file says no more
    return std::nullopt;
  }
}

// A noise floor measures the same case on another candidate: one made on another model,
// other weights or other inputs would gate every row against an unrelated error.
void check_floor_case(const CompareCmd& c) {
  const auto a = case_facts(c.file_a);
  const auto f = a ? floor_facts(c.floor_file, c.floor_group) : std::nullopt;
  if (!f) return;
  if (f->config != a->config)
    input_error("--floor {}: made on another model (the model_config of {} differs from {}'s)", c.floor_file, f->file,
                c.file_a);
  for (const auto& [name, sum] : a->weights)
    if (const auto it = f->weights.find(name); it != f->weights.end() && it->second != sum)
      input_error("--floor {}: made on other weights ({} recorded by {} differs from {}'s)", c.floor_file, name,
                  f->file, c.file_a);
  if (a->ids.defined() && f->ids.defined() &&
      (a->ids.shape() != f->ids.shape() || a->ids.dtype() != f->ids.dtype() ||
       std::memcmp(a->ids.raw(), f->ids.raw(), a->ids.nbytes()) != 0))
    input_error("--floor {}: made on other inputs (the token ids of {} differ from {}'s)", c.floor_file, f->file,
                c.file_a);
}

// The floor's tensors must be A's (same shapes) and gate at least one compared row.
void check_floor_rows(const CompareCmd& c, const CompareResult& floor, const CompareResult& result) {
  for (const auto& row : floor.rows)
    if (row.shape_cand)
      input_error("--floor {}: tensor {} has shape {}, {}'s has {} (a noise floor of another model)", c.floor_file,
                  row.key(), shape_str(*row.shape_cand), c.file_a, shape_str(row.shape));
  std::set<std::string> keys;
  for (const auto& row : floor.rows) keys.insert(row.key());
  for (const auto& row : result.rows)
    if (keys.count(row.key())) return;
  input_error("--floor {}: none of its tensors is one of the {} compared", c.floor_file, result.rows.size());
}

// The flags checked before any file is read.
void check_flags(const CompareCmd& c) {
  // max_rel divides by max(|r|, rel_floor): 0 gives 0/0 where both are 0, NaN or a negative
  // floor no number at all.
  if (c.rel_floor && !(std::isfinite(*c.rel_floor) && *c.rel_floor > 0))
    input_error("--rel-floor {}: must be a finite number > 0 (the denominator floor of max_rel)", *c.rel_floor);
  if (!c.case_name.empty()) check_run_id(c.case_name, "--case");  // a folder name under reports/, as the run id
  if (!c.run_id.empty()) check_run_id(c.run_id, "--run-id");
}

EnvRecord compare_env(const CompareCmd& c) {
  EnvRecord env = capture_env("compare", c.thresholds.empty() ? "default thresholds" : c.thresholds);
  add_run_facts(env, c.file_a, recorded_weight_sha256(c.file_a), std::nullopt);
  env.extra["candidate_sha256"] = std::filesystem::equivalent(c.file_a, c.file_b) ? env.extra["case_sha256"] : file_sha256(c.file_b);
  return env;
}

// A saved run is compared as the run judged it: its --stages and thresholds, unless the
// command gives its own (then the verdicts are the command's, not the run's).
void adopt_run_settings(CompareCmd& c, const SavedRun& run) {
  if (c.stages.empty() && !run.stages.empty()) {
    c.stages = run.stages;
    fmt::print("stages      the run's --stages '{}' (pass --stages for others)\n", run.stages);
  }
  if (!c.thresholds.empty() || !c.overrides.empty() || (run.thresholds.empty() && run.threshold_overrides.empty()))
    return;
  if (!run.thresholds.empty() && !named_thresholds(run.thresholds) && !std::filesystem::is_regular_file(run.thresholds)) {
    fmt::print("note: the run's thresholds file {} is gone: judged by the default thresholds, which the run was not\n",
               run.thresholds);
    return;
  }
  c.thresholds = run.thresholds;
  c.overrides = run.threshold_overrides;
  ReportOptions shown;
  shown.thresholds = c.thresholds;
  shown.overrides = c.overrides;
  fmt::print("thresholds  the run's:{} (pass --thresholds or --threshold for others)\n", shown.flags());
}

}  // namespace

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

int run_compare(CompareCmd c) {
  check_flags(c);
  for (const auto* f : {&c.file_a, &c.file_b})
    if (!std::filesystem::is_regular_file(*f)) input_error("file not found: {}", *f);
  if (c.group_a.empty()) c.group_a = default_group(c.file_a);
  if (c.group_b.empty()) c.group_b = default_group(c.file_b);
  const std::optional<SavedRun> saved = read_saved_run(c.file_b, c.group_b);
  if (saved) adopt_run_settings(c, *saved);

  ThresholdPolicy policy = c.thresholds.empty() ? ThresholdPolicy{} : load_thresholds(c.thresholds);
  for (const auto& o : c.overrides) add_threshold_override(policy, o);
  if (c.floor_k) add_threshold_override(policy, fmt::format("floor_k={}", *c.floor_k));

  CompareOptions opt;
  opt.stages = c.stages;
  const std::optional<std::vector<Stage>> model = known_stages({c.file_a, c.file_b});
  opt.stage_order = stage_order_of(model);
  if (model) {  // a stage B names is there whole, where A holds it (a dump lacking lm_head/logits is no PASS)
    const std::vector<std::string> a_keys = list_keys(c.file_a, c.group_a);
    const std::set<std::string> in_a(a_keys.begin(), a_keys.end());
    check_named_stages(H5File(c.file_b), c.group_b, *model, [&](const std::string& key) { return in_a.count(key) > 0; });
  }
  if (c.rel_floor) opt.metrics.rel_floor = *c.rel_floor;
  const std::optional<TensorContract> contract = reference_contract(c.file_a, c.group_a);
  opt.contract = contract ? &*contract : nullptr;
  // Tensors a run saved (tdiff run --save) against its case: paired stage by stage and judged as
  // that run judged them (its selection mode, its policy's expected errors, the routing bias).
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
    if (!stages || !run) return compare_files(c.file_a, c.group_a, file, group, opt);
    std::optional<Policy> policy;
    try {
      policy.emplace(saved_run_policy(*run));
    } catch (const InputError& e) {
      fmt::print("note: the run's policy cannot be rebuilt ({}): no expected errors, judged by the scaled rule\n", e.what());
    }
    return compare_saved_run(c.file_a, c.group_a, file, group, *stages, *run, session ? &*session : nullptr,
                             policy ? &*policy : nullptr, opt);
  };
  CompareResult result = compare(c.file_b, c.group_b);
  if (!result.locator) result.locator = case_locator({c.file_a, c.file_b});

  // Rules are checked against every tensor of both dumps, not only the --stages selection,
  // so that one thresholds file serves runs restricted to a few stages.
  std::vector<std::string> keys = list_keys(c.file_a, c.group_a);
  for (auto& k : list_keys(c.file_b, c.group_b)) keys.push_back(std::move(k));
  policy.check_patterns(keys);

  std::optional<CompareResult> floor;
  if (!c.floor_file.empty()) {
    if (!std::filesystem::is_regular_file(c.floor_file)) input_error("noise-floor file not found: {}", c.floor_file);
    if (c.floor_group.empty()) c.floor_group = default_group(c.floor_file);
    check_floor_case(c);
    floor = compare(c.floor_file, c.floor_group);
    check_floor_rows(c, *floor, result);
  }
  judge(result, policy, floor ? &*floor : nullptr);

  RunInfo info;
  info.case_name = c.case_name.empty() ? std::filesystem::path(c.file_a).stem().string() : c.case_name;
  info.run_id = app::run_id_for(c.run_id, "compare");
  info.title = fmt::format("tdiff compare {} vs {}", std::filesystem::path(c.file_a).filename().string(),
                           std::filesystem::path(c.file_b).filename().string());
  info.command = reproduce_command(c);
  show_env(compare_env(c), info);

  TerminalOptions topt;
  topt.color = want_color(stdout);
  topt.all_rows = c.all_rows;
  print_terminal(stdout, result, info, topt);
  if (!c.no_reports) {
    const std::string dir = report_dir(info, c.out_dir);
    write_reports(dir, result, info);
    fmt::print("reports     {}/report.html (and report.csv, report.json, junit.xml)\n", dir);
  }
  return result.verdict == Verdict::fail ? 1 : 0;
}

}  // namespace tdiff::app
