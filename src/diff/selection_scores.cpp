#include "diff/selection_scores.h"

#include "base/error.h"
#include "model/op_table.h"
#include "model/stage_names.h"

namespace tdiff {

namespace {

// score[t, e] + bias[e]; `as_float32`: as the candidate's float32 top-k adds them (its
// comparison type may round further; that is what the routing comparison must not excuse).
Tensor add_routing_bias(const Tensor& scores, const Tensor& bias, bool as_float32, const std::string& what) {
  const std::int64_t E = bias.numel();
  if (scores.rank() == 0 || scores.dim(-1) != E)
    input_error("{}: scores {} do not match the routing bias of {} experts", what, shape_str(scores.shape()), E);
  Tensor out(DType::f64, scores.shape());
  double* o = out.data<double>();
  for (std::int64_t i = 0; i < scores.numel(); ++i) {
    const double b = bias.value(i % E);
    o[i] = as_float32 ? static_cast<double>(static_cast<float>(scores.value(i)) + static_cast<float>(b)) : scores.value(i) + b;
  }
  return out;
}

// The indexer's top-k chooses among scores that ReLU makes exactly equal (often zero), so its
// selections get the tie-aware comparison with its stored scores.
std::string indexer_scores_key(const std::string& stage) {
  const std::string suffix = ".attn.idx.topk";
  if (stage.size() > suffix.size() && stage.ends_with(suffix))
    return stage.substr(0, stage.size() - suffix.size()) + ".attn.idx.score/score";
  return "";
}

}  // namespace

SelectionScoresKey selection_scores_key(const Stage& s) {
  if (s.kind == OpKind::idx_topk) return {indexer_scores_key(s.name), ""};
  if (s.kind == OpKind::moe_select && s.inputs.size() == 1) return {s.inputs[0].key(), s.weights.at(0)};
  return {};
}

SelectionScoresKey selection_scores_key(const std::string& stage) {
  Stage s;
  s.name = stage;
  if (const auto n = parse_stage_name(stage)) s.kind = n->kind;
  else return {};
  return selection_scores_key(s);
}

ChoiceScores choice_scores(const Stage& s, Tensor ref_scores, Tensor cand_scores, WeightStore* weights,
                           const std::string& where_ref, const std::string& where_cand) {
  const SelectionScoresKey k = selection_scores_key(s);
  if (k.bias.empty()) return {std::move(ref_scores), std::move(cand_scores)};
  if (!weights) return {};
  const Tensor& bias = weights->f64(k.bias);
  ChoiceScores c;
  if (ref_scores.defined()) c.ref = add_routing_bias(ref_scores, bias, false, where_ref);
  if (cand_scores.defined()) c.cand = add_routing_bias(cand_scores, bias, true, where_cand);
  return c;
}

}  // namespace tdiff
