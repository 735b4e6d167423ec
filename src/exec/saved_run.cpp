#include "exec/saved_run.h"

#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "diff/expected.h"
#include "diff/pairing.h"

namespace tdiff {

std::optional<SavedRun> read_saved_run(const std::string& file, const std::string& group) {
  if (!h5_exists(file, group)) return std::nullopt;
  const auto attrs = h5_read_attrs(file, group);
  const auto backend = attrs.find("backend"), policy = attrs.find("policy"), selections = attrs.find("selections");
  if (backend == attrs.end() || policy == attrs.end() || selections == attrs.end()) return std::nullopt;
  return SavedRun{backend->second, policy->second, selections->second};
}

Policy saved_run_policy(const SavedRun& run) {
  const std::string sep = " + ";
  std::size_t at = run.policy.find(sep);
  Policy p = Policy::load(run.policy.substr(0, at));
  while (at != std::string::npos) {
    const std::size_t next = run.policy.find(sep, at + sep.size());
    p.add_set(run.policy.substr(at + sep.size(), next == std::string::npos ? std::string::npos : next - at - sep.size()));
    at = next;
  }
  return p;
}

std::optional<std::vector<Stage>> case_stages(const std::string& file) {
  const auto attrs = h5_read_attrs(file, "/");
  const auto it = attrs.find("model_config");
  if (it == attrs.end()) return std::nullopt;
  return build_stages(parse_config_text(it->second, file + ":/model_config"));
}

CompareResult compare_saved_run(const std::string& case_path, const std::string& ref_group, const std::string& file,
                                const std::string& group, const std::vector<Stage>& stages, const SavedRun& run,
                                CaseSession* session, const Policy* policy, CompareOptions opt) {
  opt.stage_order.clear();
  for (const auto& s : stages) opt.stage_order.push_back(s.name);
  opt.replayed_selections = run.selections == "replay";
  PairingRule rule;
  rule.opt = std::move(opt);
  rule.weights = session ? session->weights.get() : nullptr;
  CompareResult r = pair_stages(stages, list_keys(case_path, ref_group), list_keys(file, group),
                                h5_side(case_path, ref_group), h5_side(file, group), rule);
  r.seq = read_case(case_path).batch.seq();
  if (session && policy) set_expected(r, {session, policy, StageInputs::run});
  return r;
}

}  // namespace tdiff
