#include "exec/saved_run.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "casefile/reference_store.h"
#include "diff/expected.h"
#include "diff/pairing.h"
#include "exec/followed_reference.h"
#include "exec/measured_floor.h"
#include "diff/real_rows.h"

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
  SavedRun run{backend->second, policy->second, selections->second, {}, {}, {}};
  if (const auto it = attrs.find("stages"); it != attrs.end()) run.stages = it->second;
  if (const auto it = attrs.find("measured_floor"); it != attrs.end()) run.measured_floor = it->second == "on";
  if (const auto it = attrs.find("thresholds"); it != attrs.end()) {
    try {
      const auto j = nlohmann::json::parse(it->second);
      run.thresholds = j.at("file").get<std::string>();
      run.threshold_overrides = j.at("overrides").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      input_error("{}:{}: attribute thresholds is not the JSON tdiff run writes", file, group);
    }
  }
  return run;
}

std::vector<std::pair<std::string, std::string>> SavedRun::attrs() const {
  std::vector<std::pair<std::string, std::string>> a = {{"backend", backend}, {"policy", policy}, {"selections", selections}};
  if (!stages.empty()) a.emplace_back("stages", stages);
  a.emplace_back("measured_floor", measured_floor ? "on" : "off");
  if (!thresholds.empty() || !threshold_overrides.empty())
    a.emplace_back("thresholds", nlohmann::json{{"file", thresholds}, {"overrides", threshold_overrides}}.dump());
  return a;
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
  if (auto store = boundaries_reference(file, g, contract))
    side.read = [store](const std::string& key, const Tensor*) {
      const auto [stage, tensor] = split_key(key);
      return store->get(stage, tensor);
    };
  if (by == StoredBy::reference)
    side.conditioning = [file, contract](const std::string& key) { return read_conditioning(file, key, *contract); };
  return side;
}

std::function<bool(const std::string&)> reference_holds(const H5File& case_file,
                                                        std::shared_ptr<const TensorContract> contract) {
  if (auto store = boundaries_reference(case_file, "/reference", std::move(contract)))
    return [store](const std::string& key) {
      const auto [stage, tensor] = split_key(key);
      return store->has(stage, tensor);
    };
  return [case_file](const std::string& key) { return h5_exists(case_file, "/reference/" + key); };
}

std::vector<std::string> stored_keys(const H5File& file, const std::string& group, const TensorContract& contract) {
  std::vector<std::string> keys;
  if (!h5_exists(file, group)) return keys;
  const auto holds = reference_holds(file, std::make_shared<const TensorContract>(contract));
  for (const auto& spec : contract.specs())
    if (group == "/reference" ? holds(spec.key()) : h5_exists(file, stage_dataset(group, spec.key())))
      keys.push_back(spec.key());
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
  // Per-token statistics on real tokens, as the run counted them.
  const std::int64_t padding = padding_tokens(info.batch);
  if (padding)
    rule.token_rows = [&info](const Stage&, const Shape& shape) { return real_rows(shape, info.batch, 0); };
  const auto contract = std::make_shared<const TensorContract>(stages, info.config, info.batch.rows(), info.batch.seq());
  const H5File run_file = file == case_path ? case_file : H5File(file);
  const StoredBy ref_by = group_stored_by(ref_group);
  rule.opt.contract = contract.get();
  rule.opt.generation_rows = info.schedule.predicting_rows(info.batch.seq());
  const std::vector<std::string> run_keys = stored_keys(run_file, group, *contract);
  CompareResult r;
  // A free run was judged against the reference that followed its choices; so is its compare
  // where the model is at hand and the run kept its selections.
  if (session && !rule.opt.replayed_selections && ref_group == "/reference" && can_follow(*session, run_keys)) {
    FollowedCounts counts;
    r = compare_stored_on_followed_path(*session, {stored_side(run_file, group, contract, StoredBy::saved_run), run_keys,
                                                   nullptr, rule.token_rows},
                                        rule.opt, counts);
  } else {
    // Without the model to follow them with: the tokens that chose otherwise are judged apart.
    if (!rule.opt.replayed_selections) rule.divergence = std::make_shared<DivergedTokens>(stages, info.config, info.batch);
    r = pair_stages(stages, stored_keys(case_file, ref_group, *contract), run_keys,
                    stored_side(case_file, ref_group, contract, ref_by),
                    stored_side(run_file, group, contract, StoredBy::saved_run), rule);
  }
  r.divergence = rule.divergence;
  r.locator = std::make_shared<const Locator>(stages, info.config, info.batch, r.divergence);
  r.padding_tokens = padding;
  if (session && policy) {
    set_expected(r, {session, policy, StageInputs::run});
    if (run.measured_floor) {  // judged as the run was: its floor, on its stages
      MixedRunOptions mo;
      mo.compare = rule.opt.stages;
      (void)attach_measured_floor(*session, *policy, mo, r);
    }
  }
  return r;
}

}  // namespace tdiff
