#include "diff/pairing.h"

#include <set>

#include "base/error.h"
#include "diff/metrics.h"
#include "diff/selection_scores.h"
#include "diff/thresholds.h"

namespace tdiff {

namespace {

// The rows of `s`'s tensor of shape `shape` that are judged: the rule's (a dump's real rows),
// less the tokens that diverged before `s`. nullopt: all of them.
std::optional<RealRows> judged_rows(const PairingRule& rule, const Stage& s, const Shape& shape) {
  if (!rule.rows && !rule.divergence) return std::nullopt;
  RealRows rows = rule.rows ? rule.rows(s, shape) : rule.divergence->layout(s.name, shape);
  if (rule.divergence) rule.divergence->exclude(s.name, shape, rows);
  return rows;
}

Tensor viewed(const PairingRule& rule, const Stage& s, const Tensor& t) {
  if (!t.defined()) return t;
  const std::optional<RealRows> rows = judged_rows(rule, s, t.shape());
  return rows ? keep_real_rows(t, *rows) : t;
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

// A row's per-token statistics on the tokens `rule.token_rows` keeps (less the diverged ones);
// the rest of the row as computed on the judged rows. The worst tokens keep their index among
// all tokens, for locations. `ref`, `cand` and `scores`: the stage's whole tensors.
void count_tokens(const PairingRule& rule, const Stage& s, const Tensor& ref, const Tensor& cand,
                  const ChoiceScores& scores, TensorDiff& row) {
  if (!rule.token_rows || row.shape_cand || (!row.logits && !row.routing)) return;
  auto rows_of = [&](const Shape& shape) {
    RealRows rows = rule.token_rows(s, shape);
    if (rule.divergence) rule.divergence->exclude(s.name, shape, rows);
    return rows;
  };
  const auto real = [&](const Tensor& t) { return keep_real_rows(t, rows_of(t.shape())); };
  const Tensor c = cand.shape() == ref.shape() ? cand : cand.reshaped(ref.shape());
  if (row.logits) {
    const RealRows rows = rows_of(ref.shape());
    std::vector<std::int64_t> index;  // counted token -> its row among all
    for (std::int64_t i = 0; i < rows.rows; ++i)
      if (rows.real[static_cast<std::size_t>(i)]) index.push_back(i);
    row.logits = logits_metrics(keep_real_rows(ref, rows), keep_real_rows(c, rows), rule.opt.metrics);
    for (auto& t : row.logits->worst) t.token = index[static_cast<std::size_t>(t.token)];
  }
  if (row.routing) {
    const Tensor ref_scores = scores.ref.defined() ? real(scores.ref) : Tensor();
    const Tensor cand_scores = scores.cand.defined() && ref_scores.defined() ? real(scores.cand) : Tensor();
    const bool replayed = row.routing->replayed, own_path = row.routing->own_path;
    row.routing = routing_metrics(real(ref), real(c), ref_scores.defined() ? &ref_scores : nullptr,
                                  cand_scores.defined() ? &cand_scores : nullptr);
    row.routing->replayed = replayed;
    row.routing->own_path = own_path;
  }
}

// The rows of tokens that diverged before `s` (diff/divergence.h): counted, and for values
// their own error reported beside the judged rows' (explained divergence, no verdict).
void report_diverged(const PairingRule& rule, const Stage& s, const Tensor& ref, const Tensor& cand, TensorDiff& row) {
  if (!rule.divergence || row.shape_cand) return;
  const std::vector<bool> gone = rule.divergence->diverged_rows(s.name, ref.shape());
  if (gone.empty()) return;
  RealRows rows = rule.divergence->layout(s.name, ref.shape());
  const std::optional<RealRows> base = rule.rows ? std::optional<RealRows>(rule.rows(s, ref.shape())) : std::nullopt;
  for (std::size_t r = 0; r < rows.real.size(); ++r)
    rows.real[r] = gone[r] && (!base || base->real[r]);
  row.diverged_rows = rows.count();
  if (!row.diverged_rows || !(row.kind == TensorKind::values || row.kind == TensorKind::logits)) return;
  const Tensor c = cand.shape() == ref.shape() ? cand : cand.reshaped(ref.shape());
  row.diverged_rel_l2 = tensor_metrics(keep_real_rows(ref, rows), keep_real_rows(c, rows), rule.opt.metrics).rel_l2;
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
  ChoiceScores scores, judged_scores;  // the stage's whole rows; the judged ones
  if (const std::string sk = selection_scores_key(s).key; !sk.empty()) {
    Tensor ref_scores = ref.read(sk, nullptr);
    Tensor cand_scores = cand.read(sk, ref_scores.defined() ? &ref_scores : nullptr);
    auto t = measure(rule);
    scores = choice_scores(s, std::move(ref_scores), std::move(cand_scores), rule.weights, ref.where + sk, cand.where + sk);
    judged_scores = {viewed(rule, s, scores.ref), viewed(rule, s, scores.cand)};
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
    r.rows.push_back(diff_tensor(key, a, b, rule.opt, judged_scores.ref.defined() ? &judged_scores.ref : nullptr,
                                 judged_scores.cand.defined() ? &judged_scores.cand : nullptr));
    TensorDiff& row = r.rows.back();
    // A generation's tokens on the whole rows: teacher-forced, every row is judged, diverged or not.
    if (row.logits && !row.tokens && !rule.opt.generation_rows.empty() && full_ref.rank() == 3 &&
        full_cand.numel() == full_ref.numel())
      row.tokens = token_steps(full_ref, full_cand.shape() == full_ref.shape() ? full_cand : full_cand.reshaped(full_ref.shape()),
                               rule.opt.generation_rows);
    if (row.routing && (rule.own_path || rule.divergence)) row.routing->own_path = true;
    add_conditioning(row, s, ref, rule, a, b);
    count_tokens(rule, s, full_ref, full_cand, scores, row);
    fit_systematic(row, a, b, rule.opt, choices.defined() ? &choices : nullptr);
    report_diverged(rule, s, full_ref, full_cand, row);
    // Marked after the stage's own rows: its flips are judged here, their consequences apart.
    if (row.routing && rule.divergence && !row.shape_cand) rule.divergence->mark(s, full_ref, full_cand);
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
