#pragma once
// A backend implements operator kinds; the executor hands it one stage at a time.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/stage_graph.h"
#include "base/tensor.h"
#include "formats/weights.h"

namespace tdiff {

// How exact ties in a top-k are broken (model-spec §5.11).
enum class TieRule {
  lowest_index,  // the reference's own rule
  torch_cpu,     // torch.topk on the CPU: nth_element over (value, index), then the first k
};

struct RunContext {
  const ModelConfig& config;
  WeightStore& weights;
  const Batch& batch;
  TieRule tie_rule = TieRule::lowest_index;
  // The index of the first compressed entry an entries-layout input holds: 0 in a prefill; in
  // a generation step (exec/step_run.h) the entries the cache had before it, so that
  // entry_rope rotates each new entry at its own w·m.
  std::int64_t first_entry = 0;
};

class Policy;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Computes the stage's outputs (in the order of stage.outputs) from its inputs (in the
  // order of stage.inputs). Float outputs are returned as f64 host tensors.
  virtual std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) = 0;
  // Whether run() computes this operator kind (its handler table has it).
  virtual bool implements(OpKind kind) const = 0;

  // Asynchronous backends (hip) return outputs whose host data is still being copied from the
  // device; finish() waits for every pending copy. The executor defers reading such outputs
  // (taps, other backends) until it has called finish(), and calls it at the end of a run.
  virtual bool deferred_outputs() const { return false; }
  virtual void finish() {}
  // No later stage reads `key` ("<stage>/<tensor>", an output of this backend): a backend
  // that keeps device copies of its outputs may free that one.
  virtual void release(const std::string& key) {}
  // Before a mixed run (exec/mixed_run.h): which stages of the model it runs on this backend.
  // An engine run as a process (exec/engine_backend.h) runs once per such assignment.
  virtual void assign(const std::vector<bool>& on_candidate) {}
  // Whether the backend runs a generation step (exec/step_run.h): a step's queries against
  // the cache's keys (attention's Sk ≠ S) and RunContext::first_entry. Others run a
  // generation case as one prefill.
  virtual bool runs_steps() const { return false; }
  // Facts about the device for the run's environment record (GPU name and arch, driver and
  // runtime versions, ...); empty for CPU backends.
  virtual std::map<std::string, std::string> environment() const { return {}; }
  // The numerics policy the backend computes under (emu, hip): the tolerance model
  // (diff/expected.h) derives each tensor's expected error from it. Null for the reference.
  virtual const Policy* policy() const { return nullptr; }
};

}  // namespace tdiff
