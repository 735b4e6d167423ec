#pragma once
// Runs the stage list in order, one backend per stage, and hands every output to the taps.
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace tdiff {

// Tensors by key "<stage>/<tensor>" ("inputs/ids", "L03.attn.core/o", ...).
using TensorMap = std::unordered_map<std::string, Tensor>;

struct ExecutorHooks {
  // Called after each stage with its outputs (keys "<stage>/<tensor>").
  std::function<void(const Stage&, std::size_t index, const std::vector<Tensor>&)> on_stage;
  // Asked before each stage: returning true with `out` filled skips the backend (outputs
  // already known, e.g. cached reference tensors whose inputs are unchanged).
  std::function<bool(const Stage&, std::size_t index, std::vector<Tensor>& out)> cached;
  // Asked after each stage the backend ran: returning true with `replacement` filled makes
  // later stages read those tensors instead of the stage's own outputs (selection replay);
  // on_stage still sees the stage's own outputs.
  std::function<bool(const Stage&, std::size_t index, std::vector<Tensor>& replacement)> replace;
};

// Runs stages [0, stages.size()); `backend_for` picks the backend per stage. `env` holds the
// inputs ("inputs/*") and receives every output. Tensors no later stage reads are dropped
// from env (and released by the backend that made them) unless `keep_all` is set. Outputs
// of a backend with deferred_outputs() reach on_stage after its finish(): before another
// backend runs, when 2 GiB of outputs wait, and at the end (their order is kept).
void execute(const std::vector<Stage>& stages, const std::function<Backend&(const Stage&)>& backend_for,
             RunContext& ctx, TensorMap& env, const ExecutorHooks& hooks = {}, bool keep_all = false);

// Puts the batch inputs into env under "inputs/ids", "inputs/mask", "inputs/pos".
void put_inputs(const Batch& batch, TensorMap& env);

}  // namespace tdiff
