#include "diff/pairing.h"

#include <set>

#include "base/error.h"
#include "diff/selection_scores.h"
#include "diff/thresholds.h"

namespace tdiff {

namespace {

Tensor viewed(const PairingRule& rule, const Stage& s, Tensor t) {
  return rule.view && t.defined() ? rule.view(s, t) : t;
}

std::optional<PhaseTimes::Scope> measure(const PairingRule& rule) {
  if (!rule.times) return std::nullopt;
  return std::optional<PhaseTimes::Scope>(std::in_place, *rule.times, kPairingPhase);
}

// The reference's expert ids of a moe.experts stage (the rows of its tensors), which slice its
// outputs by expert for the systematic fits; undefined for other stages.
Tensor expert_choices(const Stage& s, const TensorSide& ref, const PairingRule& rule) {
  if (!rule.opt.contract || s.kind != OpKind::moe_experts) return {};
  for (const auto& in : s.inputs)
    if (const auto name = parse_stage_name(in.stage); name && name->kind == OpKind::moe_select)
      return viewed(rule, s, ref.read(in.key(), nullptr));
  return {};
}

}  // namespace

void pair_stage(const Stage& s, const TensorSide& ref, const TensorSide& cand, const PairingRule& rule, CompareResult& r) {
  ChoiceScores scores;
  if (const std::string sk = selection_scores_key(s).key; !sk.empty()) {
    const Tensor ref_scores = ref.read(sk, nullptr);
    const Tensor cand_scores = cand.read(sk, ref_scores.defined() ? &ref_scores : nullptr);
    Tensor ref_view = viewed(rule, s, ref_scores), cand_view = viewed(rule, s, cand_scores);
    auto t = measure(rule);
    scores = choice_scores(s, std::move(ref_view), std::move(cand_view), rule.weights, ref.where + sk, cand.where + sk);
  }
  for (const auto& name : s.outputs) {
    const std::string key = s.name + "/" + name;
    if (!rule.opt.stages.empty() && !stage_matches(rule.opt.stages, s.name, name)) continue;
    const Tensor full_ref = ref.read(key, nullptr);
    if (!full_ref.defined()) continue;
    const Tensor full_cand = cand.read(key, &full_ref);
    if (!full_cand.defined()) {
      r.only_ref.push_back(key);
      continue;
    }
    const Tensor a = viewed(rule, s, full_ref), b = viewed(rule, s, full_cand);
    const Tensor choices = expert_choices(s, ref, rule);
    auto t = measure(rule);
    r.rows.push_back(diff_tensor(key, a, b, rule.opt, scores.ref.defined() ? &scores.ref : nullptr,
                                 scores.cand.defined() ? &scores.cand : nullptr));
    fit_systematic(r.rows.back(), a, b, rule.opt, choices.defined() ? &choices : nullptr);
  }
}

CompareResult pair_stages(const std::vector<Stage>& stages, const std::vector<std::string>& ref_keys,
                          const std::vector<std::string>& cand_keys, const TensorSide& ref, const TensorSide& cand,
                          const PairingRule& rule) {
  CompareResult r;
  r.label_ref = ref.label;
  r.label_cand = cand.label;
  const std::set<std::string> in_ref(ref_keys.begin(), ref_keys.end()), in_cand(cand_keys.begin(), cand_keys.end());
  auto chosen = [&](const Stage& s, const std::string& t) {
    return in_ref.count(s.name + "/" + t) && (rule.opt.stages.empty() || stage_matches(rule.opt.stages, s.name, t));
  };
  // Each side read only where it holds the key: a stored side is never asked for what it lacks.
  TensorSide stored_ref = ref, stored_cand = cand;
  stored_ref.read = [&](const std::string& key, const Tensor* like) { return in_ref.count(key) ? ref.read(key, like) : Tensor(); };
  stored_cand.read = [&](const std::string& key, const Tensor* like) {
    return in_cand.count(key) ? cand.read(key, like) : Tensor();
  };
  bool any = false;
  std::set<std::string> outputs;
  for (const auto& s : stages)
    for (const auto& t : s.outputs) {
      outputs.insert(s.name + "/" + t);
      any = any || chosen(s, t);
    }
  if (!any && rule.opt.stages.empty()) input_error("{} holds no output of this model's stages", ref.label);
  if (!any) input_error("--stages '{}' matches no tensor of {}", rule.opt.stages, ref.label);
  for (const auto& s : stages) pair_stage(s, stored_ref, stored_cand, rule, r);
  std::vector<std::string> only_cand;
  for (const auto& k : cand_keys) {
    const auto [stage, tensor] = split_key(k);
    if (!in_ref.count(k) && (rule.opt.stages.empty() || stage_matches(rule.opt.stages, stage, tensor)))
      only_cand.push_back(k);
  }
  r.only_cand = order_keys(only_cand, rule.opt.stage_order);
  return r;
}

}  // namespace tdiff
