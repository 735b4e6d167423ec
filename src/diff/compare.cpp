#include "diff/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/h5io.h"
#include "casefile/reference_store.h"
#include "diff/expected.h"
#include "diff/selection_scores.h"
#include "diff/step_errors.h"

namespace tdiff {

namespace {

bool matches_any(const std::vector<std::string>& patterns, const std::string& stage, const std::string& tensor) {
  for (const auto& p : patterns)
    if (stage_matches(p, stage, tensor)) return true;
  return false;
}

// The output kind of the stage's operator; for other names, what the patterns say.
TensorKind declared_kind(const std::string& stage, const std::string& tensor, const CompareOptions& opt) {
  if (const auto s = parse_stage_name(stage)) return op_info(s->kind).output;
  if (matches_any(opt.routing_patterns, stage, tensor)) return TensorKind::routing;
  if (matches_any(opt.logits_patterns, stage, tensor)) return TensorKind::logits;
  return TensorKind::values;
}

// Keeps the keys that pass the --stages filter; InputError when none does.
std::vector<std::string> filter_keys(const std::vector<std::string>& keys, const std::string& glob) {
  if (glob.empty()) return keys;
  std::vector<std::string> out;
  for (const auto& k : keys) {
    auto [stage, tensor] = split_key(k);
    if (stage_matches(glob, stage, tensor)) out.push_back(k);
  }
  return out;
}

// Pairs the keys of both sides; fills only_ref/only_cand; returns the common keys in order.
std::vector<std::string> pair_keys(std::vector<std::string> ref, std::vector<std::string> cand,
                                   const CompareOptions& opt, CompareResult& r) {
  const auto all_ref = ref.size(), all_cand = cand.size();
  ref = filter_keys(ref, opt.stages);
  cand = filter_keys(cand, opt.stages);
  if (!opt.stages.empty() && ref.empty() && cand.empty())
    input_error("--stages '{}' matches none of the {} + {} tensors of {} and {}", opt.stages, all_ref, all_cand,
                r.label_ref, r.label_cand);
  std::set<std::string> in_ref(ref.begin(), ref.end()), in_cand(cand.begin(), cand.end());
  std::vector<std::string> common;
  for (const auto& k : ref) (in_cand.count(k) ? common : r.only_ref).push_back(k);
  for (const auto& k : cand)
    if (!in_ref.count(k)) r.only_cand.push_back(k);
  if (common.empty())
    input_error("no tensor names in common between {} ({} tensors) and {} ({} tensors)", r.label_ref, ref.size(),
                r.label_cand, cand.size());
  r.only_ref = order_keys(r.only_ref, opt.stage_order);
  r.only_cand = order_keys(r.only_cand, opt.stage_order);
  return order_keys(common, opt.stage_order);
}

std::string relative_key(const std::string& path, const std::string& group) {
  std::string g = group;
  while (g.size() > 1 && g.back() == '/') g.pop_back();
  std::string k = (g == "/" || g.empty()) ? path : path.substr(g.size());
  while (!k.empty() && k.front() == '/') k.erase(k.begin());
  return k;
}

std::string join_path(const std::string& group, const std::string& key) {
  std::string g = group;
  while (!g.empty() && g.back() == '/') g.pop_back();
  return g + "/" + key;
}

}  // namespace

std::pair<std::string, std::string> split_key(const std::string& key) {
  const auto slash = key.rfind('/');
  if (slash == std::string::npos) return {key, ""};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::vector<std::string> order_keys(std::vector<std::string> keys, const std::vector<std::string>& stage_order) {
  std::unordered_map<std::string, int> rank;
  for (std::size_t i = 0; i < stage_order.size(); ++i) rank.emplace(stage_order[i], static_cast<int>(i));
  auto sort_key = [&](const std::string& k) {
    const auto [stage, tensor] = split_key(k);
    auto it = rank.find(stage);
    const int known = it == rank.end() ? 1 : 0;
    const int pos = it == rank.end() ? 0 : it->second;
    return std::tuple(known, pos, stage_part(stage), stage_layer(stage), stage, tensor);
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const std::string& a, const std::string& b) { return sort_key(a) < sort_key(b); });
  return keys;
}

std::vector<std::string> list_keys(const std::string& file, const std::string& group) {
  std::vector<std::string> keys;
  for (const auto& p : h5_list_datasets(file, group)) keys.push_back(relative_key(p, group));
  return keys;
}


namespace {

// A row for two tensors of different shapes: nothing to measure, FAIL when judged.
TensorDiff shape_mismatch(TensorDiff d, const Tensor& cand) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  d.shape_cand = cand.shape();
  d.kind = TensorKind::values;  // the reports print its NaN metrics and the reason
  d.metrics.cosine = d.metrics.max_abs = d.metrics.max_abs_scaled = d.metrics.rmse = d.metrics.rel_l2 = nan;
  d.metrics.max_rel = nan;
  return d;
}
}  // namespace

TensorDiff diff_tensor(const std::string& key, const Tensor& ref, const Tensor& cand_in, const CompareOptions& opt,
                       const Tensor* ref_scores, const Tensor* cand_scores) {
  TensorDiff d;
  std::tie(d.stage, d.tensor) = split_key(key);
  d.dtype_ref = ref.dtype();
  d.dtype_cand = cand_in.dtype();
  d.shape = ref.shape();
  const bool same = ref.shape() == cand_in.shape();
  if (!same && squeezed(ref.shape()) != squeezed(cand_in.shape())) return shape_mismatch(std::move(d), cand_in);
  const Tensor cand = same ? cand_in : cand_in.reshaped(ref.shape());
  d.metrics = tensor_metrics(ref, cand, opt.metrics);
  const bool floats = is_float(ref.dtype()) || is_float(cand.dtype());
  const TensorKind declared = declared_kind(d.stage, d.tensor, opt);
  if (!floats && ref.rank() > 0 && declared == TensorKind::routing) {
    d.kind = TensorKind::routing;
    d.routing = routing_metrics(ref, cand, ref_scores, ref_scores ? cand_scores : nullptr);
    d.routing->replayed = opt.replayed_selections;
  } else if (!floats) {
    d.kind = TensorKind::exact;
  } else if (ref.rank() > 0 && declared == TensorKind::logits) {
    d.kind = TensorKind::logits;
    d.logits = logits_metrics(ref, cand, opt.metrics);
    if (!opt.generation_rows.empty() && ref.rank() == 3) d.tokens = token_steps(ref, cand, opt.generation_rows);
  }
  if (floats) d.step_rel_l2 = step_rel_l2(ref, cand, opt.steps);
  return d;
}

namespace {

// The case's tokens per batch row: the S of its [B,S,...] tensors (0 when none has one).
std::int64_t contract_seq(const TensorContract& contract) {
  for (const auto& spec : contract.specs())
    if (spec.axes.size() >= 2 && spec.axes[0].name == "B" && spec.axes[1].name == "S") return spec.axes[1].size;
  return 0;
}

// What one rounding can do to every element of a slice alike: the unit roundoff of the format
// the candidate's output is rounded to (the expected error's, "bf16", "f32 stream", else the
// candidate's stored dtype). A RoPE table's float32 angle p·w moves cos and sin by up to u·S
// alike for every row of a position: there the expected error's local part, which holds it.
double output_unit(const TensorDiff& row) {
  if (row.expected) {
    const auto name = parse_stage_name(row.stage);
    if (name && name->kind == OpKind::rope_table) return std::sqrt(3.0) * row.expected->local;
    const std::string format = row.expected->format.substr(0, row.expected->format.find(' '));
    for (DType t : {DType::bf16, DType::f16, DType::f32, DType::f64, DType::f8_e4m3})
      if (format == dtype_name(t)) return unit_roundoff(t);
    if (format == "float64") return unit_roundoff(DType::f64);
  }
  return is_float(row.dtype_cand) ? unit_roundoff(row.dtype_cand) : unit_roundoff(DType::f64);
}

}  // namespace

std::string expert_choice_key(const std::string& stage, const TensorContract& contract) {
  const auto name = parse_stage_name(stage);
  if (!name || name->kind != OpKind::moe_experts) return "";
  for (const auto& spec : contract.specs())
    if (spec.kind == OpKind::moe_select && stage_layer(spec.stage) == name->layer) return spec.key();
  return "";
}

void fit_systematic(TensorDiff& row, const Tensor& ref, const Tensor& cand, const CompareOptions& opt,
                    const Tensor* choices) {
  if (!opt.contract || row.shape_cand || (row.kind != TensorKind::values && row.kind != TensorKind::logits)) return;
  const TensorSpec* spec = opt.contract->find(row.key());
  if (!spec || spec->value != ValueClass::floating) return;
  std::optional<SliceLayout> layout = slice_layout(*spec, ref.shape(), contract_seq(*opt.contract));
  if (!layout) return;
  const TensorSpec* chosen = choices ? opt.contract->find(expert_choice_key(row.stage, *opt.contract)) : nullptr;
  if (chosen && chosen->range && choices->defined() && choices->numel() == layout->rows * chosen->axes.back().size) {
    layout->groups = *choices;
    layout->n_groups = chosen->range->hi;
  }
  row.systematic = fit_slices(row.key(), ref, cand, *layout);
}

CompareResult compare_maps(const NamedTensors& ref, const NamedTensors& cand, const CompareOptions& opt) {
  CompareResult r;
  r.label_ref = "reference";
  r.label_cand = "candidate";
  std::vector<std::string> kr, kc;
  for (const auto& [k, t] : ref) kr.push_back(k);
  for (const auto& [k, t] : cand) kc.push_back(k);
  for (const auto& key : pair_keys(kr, kc, opt, r)) {
    const std::string sk = selection_scores_key(split_key(key).first).key;
    auto scores = sk.empty() ? ref.end() : ref.find(sk);
    auto cand_scores = sk.empty() ? cand.end() : cand.find(sk);
    r.rows.push_back(diff_tensor(key, ref.at(key), cand.at(key), opt, scores == ref.end() ? nullptr : &scores->second,
                                 cand_scores == cand.end() ? nullptr : &cand_scores->second));
  }
  return r;
}

CompareResult compare_files(const std::string& file_ref, const std::string& group_ref, const std::string& file_cand,
                            const std::string& group_cand, const CompareOptions& opt) {
  CompareResult r;
  r.label_ref = file_ref + ":" + group_ref;
  r.label_cand = file_cand + ":" + group_cand;
  // A case's boundaries reference answers for every stage (casefile/reference_store.h).
  const auto store = boundaries_reference(H5File(file_ref), group_ref);
  std::vector<std::string> kr;
  if (store) {
    for (const auto& spec : store->contract().specs())
      if (store->has(spec.stage, spec.tensor)) kr.push_back(spec.key());
  } else {
    kr = list_keys(file_ref, group_ref);
  }
  auto read_ref = [&](const std::string& key) {
    if (!store) return h5_read(file_ref, join_path(group_ref, key));
    const auto [stage, tensor] = split_key(key);
    return store->get(stage, tensor);
  };
  const std::vector<std::string> kc = list_keys(file_cand, group_cand);
  const std::set<std::string> ref_keys(kr.begin(), kr.end());
  for (const auto& key : pair_keys(kr, kc, opt, r)) {
    const Tensor a = read_ref(key);
    const Tensor b = h5_read(file_cand, join_path(group_cand, key));
    const std::string sk = selection_scores_key(split_key(key).first).key;
    Tensor scores, cand_scores;
    if (!sk.empty() && ref_keys.count(sk)) scores = read_ref(sk);
    if (scores.defined() && std::find(kc.begin(), kc.end(), sk) != kc.end())
      cand_scores = h5_read(file_cand, join_path(group_cand, sk));
    try {
      r.rows.push_back(diff_tensor(key, a, b, opt, scores.defined() ? &scores : nullptr,
                                   cand_scores.defined() ? &cand_scores : nullptr));
      const std::string ck = opt.contract ? expert_choice_key(split_key(key).first, *opt.contract) : "";
      const Tensor choices = !ck.empty() && ref_keys.count(ck) ? read_ref(ck) : Tensor();
      fit_systematic(r.rows.back(), a, b, opt, choices.defined() ? &choices : nullptr);
    } catch (const InputError& e) {
      input_error("{} vs {}: {}", file_ref, file_cand, e.what());
    }
  }
  return r;
}

void judge(CompareResult& r, const ThresholdPolicy& policy, const CompareResult* floor) {
  std::unordered_map<std::string, const TensorDiff*> floor_rows;
  if (floor)
    for (const auto& row : floor->rows) floor_rows.emplace(row.key(), &row);
  r.verdict = (r.only_ref.empty() && r.only_cand.empty()) ? Verdict::pass : Verdict::warn;
  r.first_fail = -1;
  r.thresholds = policy.defaults;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    TensorDiff& row = r.rows[i];
    JudgeInput in;
    in.metrics = &row.metrics;
    in.logits = row.logits ? &*row.logits : nullptr;
    in.routing = row.routing ? &*row.routing : nullptr;
    in.exact = row.kind == TensorKind::routing || row.kind == TensorKind::exact;
    row.floor_rmse.reset();
    if (auto it = floor_rows.find(row.key()); it != floor_rows.end()) {
      in.floor = &it->second->metrics;
      row.floor_rmse = it->second->metrics.rmse;
    }
    in.expected = row.expected ? &*row.expected : nullptr;
    in.measured = row.measured_floor ? &*row.measured_floor : nullptr;
    row.thresholds = policy.for_tensor(row.stage, row.tensor);
    if (row.tokens) classify_tokens(*row.tokens, in.expected, row.thresholds.expected_fail);
    in.tokens = row.tokens ? &*row.tokens : nullptr;
    if (row.systematic) {
      row.systematic->unit = output_unit(row);
      // A token's row moves as a whole on its inputs' error wherever a per-row factor is
      // computed from them (a norm's denominator, the indexer's per-query weights, a softmax
      // split between keys of different values, amplified by the reference's conditioning):
      // the rows' family is held to what the expected error explains there, at the FAIL ratio.
      if (row.expected) {
        const ExpectedError& e = *row.expected;
        const double g = row.conditioning ? row.conditioning->max_gain : 1.0;
        row.systematic->row_unit = row.thresholds.expected_fail * std::sqrt(e.local * e.local + g * g * e.inherited * e.inherited);
        // An offset of any other slice at least the tensor's own expected error: tokens that
        // share a massive activation share its rounding, so a stream or channel of a map
        // computed from them shifts coherently (an outlier case: stream 0 of a Sinkhorn map
        // offset by 2x its E). Rounding shared that way does not scale one head.
        row.systematic->offset_unit = e.rel;
      }
    }
    in.systematic = row.systematic ? &*row.systematic : nullptr;
    row.tolerance_ratio = in.expected && !in.exact ? expected_ratio(row.metrics, *in.expected)
                                                   : std::numeric_limits<double>::quiet_NaN();
    const Judgement j = row.shape_cand ? Judgement{Verdict::fail, fmt::format("shape mismatch: reference {} vs candidate {}",
                                                                             shape_str(row.shape), shape_str(*row.shape_cand)),
                                                  "", std::numeric_limits<double>::quiet_NaN()}
                                       : judge_tensor(in, row.thresholds);
    row.verdict = j.verdict;
    row.reason = j.reason;
    row.decided_by = j.decided_by;
    row.floor_ratio = j.floor_ratio;
    r.verdict = worst(r.verdict, j.verdict);
    if (j.verdict == Verdict::fail && r.first_fail < 0) r.first_fail = static_cast<int>(i);
  }
}

}  // namespace tdiff
