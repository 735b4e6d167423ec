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

// The same run a stage at a time, for a caller that steps two runs side by side (a reference
// that follows a candidate's choices, exec/followed_reference.h). Stages run in order;
// finish() hands the outputs an asynchronous backend still holds to on_stage.
class Execution {
 public:
  Execution(const std::vector<Stage>& stages, std::function<Backend&(const Stage&)> backend_for, RunContext& ctx,
            TensorMap& env, ExecutorHooks hooks, bool keep_all = false);
  bool done() const { return next_ == stages_.size(); }
  std::size_t next() const { return next_; }  // the index step() runs
  void step();
  void finish() { flush(); }

 private:
  void flush();
  struct Deferred {
    std::size_t index;
    std::vector<Tensor> out;
  };
  static constexpr std::size_t kMaxDeferredBytes = std::size_t{2} << 30;
  const std::vector<Stage>& stages_;
  std::function<Backend&(const Stage&)> backend_for_;
  RunContext& ctx_;
  TensorMap& env_;
  ExecutorHooks hooks_;
  bool keep_all_;
  std::size_t next_ = 0;
  std::unordered_map<std::string, std::size_t> last_use_;
  std::unordered_map<std::string, Backend*> producer_;
  std::vector<Deferred> deferred_;
  std::size_t deferred_bytes_ = 0;
  Backend* pending_ = nullptr;
};

// Puts the batch inputs into env under "inputs/ids", "inputs/mask", "inputs/pos".
void put_inputs(const Batch& batch, TensorMap& env);

}  // namespace tdiff
