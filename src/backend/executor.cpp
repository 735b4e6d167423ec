#include "backend/executor.h"

#include <stdexcept>

#include <fmt/format.h>

#include "base/error.h"

namespace tdiff {

void put_inputs(const Batch& batch, TensorMap& env) {
  env["inputs/ids"] = batch.ids;
  env["inputs/mask"] = batch.mask;
  env["inputs/pos"] = batch.pos;
}

Execution::Execution(const std::vector<Stage>& stages, std::function<Backend&(const Stage&)> backend_for, RunContext& ctx,
                     TensorMap& env, ExecutorHooks hooks, bool keep_all)
    : stages_(stages), backend_for_(std::move(backend_for)), ctx_(ctx), env_(env), hooks_(std::move(hooks)),
      keep_all_(keep_all) {
  // Last reader of every key, so intermediate tensors can be released early.
  for (std::size_t i = 0; i < stages.size(); ++i)
    for (const auto& in : stages[i].inputs) last_use_[in.key()] = i;
}

// Outputs of an asynchronous backend are handed to on_stage only after its finish(): when the
// next stage runs elsewhere (another backend may read them), when too many bytes wait, and at
// the end.
void Execution::flush() {
  if (pending_) pending_->finish();
  pending_ = nullptr;
  for (auto& d : deferred_) hooks_.on_stage(stages_[d.index], d.index, d.out);
  deferred_.clear();
  deferred_bytes_ = 0;
}

void Execution::step() {
  const std::size_t i = next_++;
  const Stage& s = stages_.at(i);
  Backend& backend = backend_for_(s);
  if (pending_ && pending_ != &backend) flush();
  std::vector<const Tensor*> inputs;
  for (const auto& in : s.inputs) {
    auto it = env_.find(in.key());
    if (it == env_.end()) throw std::logic_error(fmt::format("stage {}: input {} was not computed", s.name, in.key()));
    inputs.push_back(&it->second);
  }
  std::vector<Tensor> out;
  Backend* made_by = nullptr;
  if (hooks_.cached && hooks_.cached(s, i, out)) {
    flush();
  } else {
    out = backend.run(s, inputs, ctx_);
    made_by = &backend;
    if (backend.deferred_outputs()) pending_ = &backend;
  }
  if (out.size() != s.outputs.size())
    throw std::logic_error(fmt::format("stage {}: backend returned {} outputs, expected {}", s.name, out.size(), s.outputs.size()));
  if (hooks_.on_stage) {
    if (made_by && made_by->deferred_outputs()) {
      for (const auto& t : out) deferred_bytes_ += t.nbytes();
      deferred_.push_back({i, out});
      if (deferred_bytes_ > kMaxDeferredBytes) flush();
    } else {
      hooks_.on_stage(s, i, out);
    }
  }
  std::vector<Tensor> replacement;
  if (made_by && hooks_.replace && hooks_.replace(s, i, replacement)) {
    if (replacement.size() != out.size())
      throw std::logic_error(fmt::format("stage {}: replacement has {} outputs, expected {}", s.name, replacement.size(), out.size()));
    out = std::move(replacement);
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::string key = s.name + "/" + s.outputs[k];
    env_[key] = std::move(out[k]);
    producer_[key] = made_by;
  }
  ctx_.weights.trim();  // between stages no backend holds a reference into the weight cache
  if (!keep_all_)
    for (const auto& in : s.inputs) {
      auto key = in.key();
      if (in.stage != "inputs" && last_use_[key] == i) {
        env_.erase(key);
        auto p = producer_.find(key);
        if (p != producer_.end() && p->second) p->second->release(key);
      }
    }
}

void execute(const std::vector<Stage>& stages, const std::function<Backend&(const Stage&)>& backend_for,
             RunContext& ctx, TensorMap& env, const ExecutorHooks& hooks, bool keep_all) {
  Execution run(stages, backend_for, ctx, env, hooks, keep_all);
  while (!run.done()) run.step();
  run.finish();
}

}  // namespace tdiff
