#pragma once
// What a selection stage chooses on, for the routing comparison (diff/metrics.h) that tells a
// near-tie flip from a fault: the indexer's stored scores, or the router's scores plus the
// routing bias (top-k layers; hash layers choose by token id and have none). The one rule of
// every pairing (diff/pairing.h), so runs, saved runs and dumps judge a selection the same way.
#include <string>

#include "model/stage_graph.h"
#include "base/tensor.h"
#include "formats/weights.h"

namespace tdiff {

struct SelectionScoresKey {
  std::string key;   // "<stage>/<tensor>" of the stored scores ("" when none)
  std::string bias;  // weight added before the top-k ("" when none)
};
SelectionScoresKey selection_scores_key(const Stage& s);
// The same for a bare stage name, as dumps without a model carry them: the operator kind the
// name says, and no inputs, so a router's scores (an input of moe.select) stay unknown.
SelectionScoresKey selection_scores_key(const std::string& stage);

struct ChoiceScores {
  Tensor ref, cand;  // undefined where a side has none
};
// From the stored scores of each side (either may be undefined): score + bias in float64 for
// the reference, and as the candidate's float32 top-k adds them for the candidate. A stage
// with a bias and no `weights` to read it from gets no scores (its flips stay unexplained).
ChoiceScores choice_scores(const Stage& s, Tensor ref_scores, Tensor cand_scores, WeightStore* weights,
                           const std::string& where_ref, const std::string& where_cand);

}  // namespace tdiff
