#pragma once
// Tokens that followed their own selection. A candidate that runs free (a backend's run
// --selections free, an engine's dump of its own forward) may take another expert or another
// set of KV entries than the reference for a token whose scores sit near a tie. From that stage
// on the token's numbers legitimately differ: they are another, equally valid, path through the
// model. Judging them against the reference's path FAILs a correct engine on nothing it can fix.
//
// So the pairing driver (diff/pairing.h) walks the stages in model order and keeps, per token of
// the padded batch, the selection stage after which it diverged. Every later tensor is judged on
// the rows of tokens that did not (compressed entries: whose r tokens did not), and its diverged
// rows are reported apart (TensorDiff::diverged_rows, diverged_rel_l2) with no verdict of their
// own. The flip itself is judged at its selection stage, on the flips the candidate's own scores
// do not explain (RoutingMetrics::apart): a top-k that did its job on its own scores moved the
// token for upstream reasons, which their own stages are judged on. Tokens that diverged earlier
// are left out of a later selection's counts too: their scores were computed on another path.
//
// What is left: a token that diverged still feeds the others' attention (its keys and values at
// later layers, its compressed entries), and the token right after one can carry an O(0.1)
// error (docs/design/tolerance-model.md § Free-running selections). So this is the fallback for
// when nothing can follow the candidate (no model, a dump without its selections); the
// followed reference (exec/followed_reference.h) has no such blind spot.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "diff/real_rows.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/stage_graph.h"

namespace tdiff {

class DivergedTokens {
 public:
  DivergedTokens(const std::vector<Stage>& stages, const ModelConfig& config, const Batch& batch);

  // After stage `s`'s selection ids were paired: marks the real tokens whose id set (order
  // aside) differs between `ref` and `cand` ([B*S, K] or [B, S, K], any integer type) and had
  // not diverged yet. Tensors of other shapes mark nothing. Returns the tokens newly marked.
  std::int64_t mark(const Stage& s, const Tensor& ref, const Tensor& cand);
  // Every row of a tensor of stage `stage` of shape `shape`, laid out as real_rows lays it out.
  RealRows layout(const std::string& stage, const Shape& shape) const;
  // Clears in `rows` (the rows of a tensor of stage `stage` of shape `shape`, as real_rows lays
  // them out) the rows of tokens that diverged before that stage; returns how many it cleared.
  std::int64_t exclude(const std::string& stage, const Shape& shape, RealRows& rows) const;
  // The rows `exclude` would clear, as a mask over the same rows (for the report of them);
  // empty for a stage the model does not have.
  std::vector<bool> diverged_rows(const std::string& stage, const Shape& shape) const;

  std::int64_t tokens() const;                               // diverged so far
  const std::string& first_stage() const { return first_; }  // where the first one did ("" none)

 private:
  bool diverged_before(std::size_t stage_index, std::int64_t token) const;
  static constexpr std::size_t kUnknown = static_cast<std::size_t>(-1);
  std::size_t index_of(const std::string& stage) const;  // kUnknown: not a stage of the model

  Batch batch_;
  std::map<std::string, std::size_t> index_;      // stage -> model order
  std::map<std::string, std::int64_t> rate_;      // stage -> compression rate (0: per token)
  std::vector<std::int64_t> since_;               // per padded token: stage index it diverged at, -1 never
  std::string first_;
};

}  // namespace tdiff
