#include "exec/selection_scores.h"

#include "base/error.h"
#include "model/op_table.h"
#include "diff/compare.h"

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

}  // namespace

SelectionScoresKey selection_scores_key(const Stage& s) {
  if (s.kind == OpKind::idx_topk) return {tie_scores_key(s.name), ""};
  if (s.kind == OpKind::moe_select && s.inputs.size() == 1) return {s.inputs[0].key(), s.weights.at(0)};
  return {};
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
