#include "backend/executor.h"

#include <fmt/format.h>

#include "base/error.h"

namespace tdiff {

void put_inputs(const Batch& batch, TensorMap& env) {
  env["inputs/ids"] = batch.ids;
  env["inputs/mask"] = batch.mask;
  env["inputs/pos"] = batch.pos;
}

void execute(const std::vector<Stage>& stages, const std::function<Backend&(const Stage&)>& backend_for,
             RunContext& ctx, TensorMap& env, const ExecutorHooks& hooks, bool keep_all) {
  // Last reader of every key, so intermediate tensors can be released early.
  std::unordered_map<std::string, std::size_t> last_use;
  for (std::size_t i = 0; i < stages.size(); ++i)
    for (const auto& in : stages[i].inputs) last_use[in.key()] = i;
  std::unordered_map<std::string, Backend*> producer;

  // Outputs of an asynchronous backend are handed to on_stage only after its finish(): when
  // the next stage runs elsewhere (another backend may read them), when too many bytes wait,
  // and at the end.
  struct Deferred {
    std::size_t index;
    std::vector<Tensor> out;
  };
  std::vector<Deferred> deferred;
  std::size_t deferred_bytes = 0;
  constexpr std::size_t kMaxDeferredBytes = std::size_t{2} << 30;
  Backend* pending = nullptr;
  auto flush = [&] {
    if (pending) pending->finish();
    pending = nullptr;
    for (auto& d : deferred) hooks.on_stage(stages[d.index], d.index, d.out);
    deferred.clear();
    deferred_bytes = 0;
  };

  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    Backend& backend = backend_for(s);
    if (pending && pending != &backend) flush();
    std::vector<const Tensor*> inputs;
    for (const auto& in : s.inputs) {
      auto it = env.find(in.key());
      if (it == env.end()) throw std::logic_error(fmt::format("stage {}: input {} was not computed", s.name, in.key()));
      inputs.push_back(&it->second);
    }
    std::vector<Tensor> out;
    Backend* made_by = nullptr;
    if (hooks.cached && hooks.cached(s, i, out)) {
      flush();
    } else {
      out = backend.run(s, inputs, ctx);
      made_by = &backend;
      if (backend.deferred_outputs()) pending = &backend;
    }
    if (out.size() != s.outputs.size())
      throw std::logic_error(fmt::format("stage {}: backend returned {} outputs, expected {}", s.name, out.size(), s.outputs.size()));
    if (hooks.on_stage) {
      if (made_by && made_by->deferred_outputs()) {
        for (const auto& t : out) deferred_bytes += t.nbytes();
        deferred.push_back({i, out});
        if (deferred_bytes > kMaxDeferredBytes) flush();
      } else {
        hooks.on_stage(s, i, out);
      }
    }
    std::vector<Tensor> replacement;
    if (made_by && hooks.replace && hooks.replace(s, i, replacement)) {
      if (replacement.size() != out.size())
        throw std::logic_error(fmt::format("stage {}: replacement has {} outputs, expected {}", s.name, replacement.size(), out.size()));
      out = std::move(replacement);
    }
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::string key = s.name + "/" + s.outputs[k];
      env[key] = std::move(out[k]);
      producer[key] = made_by;
    }
    ctx.weights.trim();  // between stages no backend holds a reference into the weight cache
    if (!keep_all)
      for (const auto& in : s.inputs) {
        auto key = in.key();
        if (in.stage != "inputs" && last_use[key] == i) {
          env.erase(key);
          auto p = producer.find(key);
          if (p != producer.end() && p->second) p->second->release(key);
        }
      }
  }
  flush();
}

}  // namespace tdiff
