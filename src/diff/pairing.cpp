#include "diff/pairing.h"

#include <set>

#include "base/error.h"
#include "diff/metrics.h"
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

// The element errors against the reference's conditioning, viewed as the tensors are (a dump's
// real rows).
void add_conditioning(TensorDiff& row, const Stage& s, const TensorSide& ref, const PairingRule& rule, const Tensor& a,
                      const Tensor& b) {
  if (!ref.conditioning || !(row.kind == TensorKind::values || row.kind == TensorKind::logits)) return;
  if (a.shape() != b.shape()) return;
  std::optional<StoredConditioning> c = ref.conditioning(row.key());
  if (!c) return;
  c->row_gain = viewed(rule, s, c->row_gain);
  if (c->row_gain.numel() <= 0 || a.numel() % c->row_gain.numel() != 0) return;
  row.conditioning = conditioned_rows(a, b, row.metrics.ref_rms, *c);
}

// A row's per-token statistics on the tokens `rule.token_view` keeps; the rest of the row as
// computed on all of them. The worst tokens keep their index among all tokens, for locations.
void count_tokens(const PairingRule& rule, const Tensor& ref, const Tensor& cand, const ChoiceScores& scores,
                  TensorDiff& row) {
  if (!rule.token_view || row.shape_cand || (!row.logits && !row.routing)) return;
  const auto real = [&](const Tensor& t) { return keep_real_rows(t, rule.token_view(t)); };
  const Tensor c = cand.shape() == ref.shape() ? cand : cand.reshaped(ref.shape());
  if (row.logits) {
    const RealRows rows = rule.token_view(ref);
    std::vector<std::int64_t> index;  // real token -> its row among all
    for (std::int64_t i = 0; i < rows.rows; ++i)
      if (rows.real[static_cast<std::size_t>(i)]) index.push_back(i);
    row.logits = logits_metrics(keep_real_rows(ref, rows), keep_real_rows(c, rows), rule.opt.metrics);
    for (auto& t : row.logits->worst) t.token = index[static_cast<std::size_t>(t.token)];
  }
  if (row.routing) {
    const Tensor ref_scores = scores.ref.defined() ? real(scores.ref) : Tensor();
    const Tensor cand_scores = scores.cand.defined() && ref_scores.defined() ? real(scores.cand) : Tensor();
    const bool replayed = row.routing->replayed;
    row.routing = routing_metrics(real(ref), real(c), ref_scores.defined() ? &ref_scores : nullptr,
                                  cand_scores.defined() ? &cand_scores : nullptr);
    row.routing->replayed = replayed;
  }
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
    add_conditioning(r.rows.back(), s, ref, rule, a, b);
    count_tokens(rule, a, b, scores, r.rows.back());
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
