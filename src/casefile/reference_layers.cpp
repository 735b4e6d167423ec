#include "casefile/reference_layers.h"

#include <chrono>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "backend/executor.h"
#include "base/progress.h"
#include "formats/weights.h"
#include "model/op_table.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

std::vector<std::string> boundary_stages(const std::vector<Stage>& stages) {
  std::map<std::string, int> layer;
  for (const auto& s : stages) layer[s.name] = s.layer;
  std::set<std::string> keep;
  for (const auto& s : stages) {
    if (s.layer < 0 || op_info(s.kind).selection) keep.insert(s.name);
    for (const auto& in : s.inputs)
      if (const auto it = layer.find(in.stage); it != layer.end() && it->second >= 0 && it->second != s.layer)
        keep.insert(in.stage);  // a layer's output read by the next layer or by final.*
  }
  std::vector<std::string> out;
  for (const auto& s : stages)
    if (keep.count(s.name)) out.push_back(s.name);
  return out;
}

LayerRecompute::LayerRecompute(const std::vector<Stage>& stages, ModelConfig config, Batch batch, TieRule rule,
                               WeightStore& weights)
    : config_(std::move(config)),
      batch_(std::move(batch)),
      rule_(rule),
      weights_(weights),
      refcpu_(std::make_unique<refcpu::RefCpuBackend>()) {
  for (const auto& s : stages) {
    layer_of_[s.name] = s.layer;
    if (s.layer >= 0) layers_[s.layer].push_back(s);
  }
}

LayerRecompute::~LayerRecompute() = default;

int LayerRecompute::layer_of(const std::string& stage) const {
  const auto it = layer_of_.find(stage);
  return it == layer_of_.end() ? -1 : it->second;
}

void LayerRecompute::run(int layer, const std::function<Tensor(const TensorRef&)>& outside,
                         const std::function<void(const Stage&, const std::vector<Tensor>&)>& on_stage) {
  const std::vector<Stage>& stages = layers_.at(layer);
  std::set<std::string> inside;
  for (const auto& s : stages)
    for (const auto& t : s.outputs) inside.insert(s.name + "/" + t);
  TensorMap env;
  put_inputs(batch_, env);
  for (const auto& s : stages)
    for (const auto& in : s.inputs)
      if (!inside.count(in.key()) && !env.count(in.key())) env[in.key()] = outside(in);
  const std::string name = fmt::format("L{:02d}", layer);
  Progress progress(fmt::format("reference: recomputing {} from its stored boundary", name), stages.size());
  const bool tty = isatty(2) != 0;  // in a log, one line per layer: a 43-layer run logs 43
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    if (tty) progress.step(i + 1, s.name);
    on_stage(s, out);
  };
  RunContext ctx{config_, weights_, batch_, rule_};
  const auto t0 = std::chrono::steady_clock::now();
  execute(
      stages, [&](const Stage&) -> Backend& { return *refcpu_; }, ctx, env, hooks);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.finish(fmt::format("reference: {} recomputed from its stored boundary ({} stages, {:.2f} s)", name,
                              stages.size(), secs));
}

}  // namespace tdiff
