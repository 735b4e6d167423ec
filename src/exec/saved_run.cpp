#include "exec/saved_run.h"

#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "diff/expected.h"
#include "diff/pairing.h"

namespace tdiff {

namespace {

// A case's own /reference is held to the reference's dtypes; another group (one run compared
// with another) to a saved run's.
StoredBy group_stored_by(std::string group) {
  while (!group.empty() && group.back() == '/') group.pop_back();
  if (!group.empty() && group.front() == '/') group.erase(0, 1);
  return group == "reference" ? StoredBy::reference : StoredBy::saved_run;
}

}  // namespace

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

TensorSide stored_side(const H5File& file, const std::string& group, std::shared_ptr<const TensorContract> contract,
                       StoredBy by) {
  std::string g = group;
  while (!g.empty() && g.back() == '/') g.pop_back();
  TensorSide side;
  side.label = file.path() + ":" + (g.empty() ? "/" : g);
  side.where = file.path() + ":" + g + "/";
  side.read = [file, g, contract, by](const std::string& key, const Tensor*) {
    return read_stage_tensor(file, g, key, *contract, by);
  };
  return side;
}

std::vector<std::string> stored_keys(const H5File& file, const std::string& group, const TensorContract& contract) {
  std::vector<std::string> keys;
  if (!h5_exists(file, group)) return keys;
  for (const auto& spec : contract.specs())
    if (h5_exists(file, stage_dataset(group, spec.key()))) keys.push_back(spec.key());
  return keys;
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
  // The session's open case when there is one: the reference it judges against.
  const H5File case_file = session ? session->reference().file() : H5File(case_path);
  const CaseInfo info = read_case(case_file);
  const auto contract = std::make_shared<const TensorContract>(stages, info.config, info.batch.rows(), info.batch.seq());
  const H5File run_file = file == case_path ? case_file : H5File(file);
  const StoredBy ref_by = group_stored_by(ref_group);
  CompareResult r = pair_stages(stages, stored_keys(case_file, ref_group, *contract), stored_keys(run_file, group, *contract),
                                stored_side(case_file, ref_group, contract, ref_by),
                                stored_side(run_file, group, contract, StoredBy::saved_run), rule);
  r.locator = std::make_shared<const Locator>(stages, info.config, info.batch);
  if (session && policy) set_expected(r, {session, policy, StageInputs::run});
  return r;
}

}  // namespace tdiff
