#pragma once
// A reference that scales (tdiff golden --store boundaries). Every stage's float64 output of a
// real-width layer at 4096 tokens is about 9.5 GB, so a full reference of V4-Flash's 43 layers
// would be about 400 GB. A boundaries reference stores what each layer reads from outside itself
// (the residual stream at every layer boundary, the RoPE tables, the window mask), the stages
// outside the layers (the embedding, final.*, lm_head) and the selections replay hands on; a
// layer's inner stages are recomputed from its stored boundary when someone reads them
// (casefile/reference_store.h), on refcpu under the tie rule golden used, and so bit for bit what a
// full store holds: refcpu computes a stage from its inputs alone, bit-identical for any thread count.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/stage_graph.h"

namespace tdiff {

class WeightStore;

// The /reference attribute "store": which stages the reference holds.
inline constexpr const char* kStoreAll = "all";                // every stage
inline constexpr const char* kStoreBoundaries = "boundaries";  // boundary_stages() and what golden --stages added
inline constexpr const char* kStoreStages = "stages";          // only what golden --stages chose

// The stages a boundaries reference stores, in stage order: every stage outside the layers
// (embedding, stream expansion, RoPE tables, window mask, final.*, lm_head), every stage whose
// output a stage of another layer reads (the residual stream at each layer boundary), and the
// selections (moe.select, attn.idx.topk) whose choices replay hands to a candidate's later stages.
std::vector<std::string> boundary_stages(const std::vector<Stage>& stages);

// One layer's stages recomputed on refcpu from the tensors the layer reads from outside itself.
class LayerRecompute {
 public:
  // `weights` outlives this object (the session's, or the reference store's own).
  LayerRecompute(const std::vector<Stage>& stages, ModelConfig config, Batch batch, TieRule rule, WeightStore& weights);
  ~LayerRecompute();
  // The layer of a stage; -1 outside the layers or for a name that is not a stage of the model.
  int layer_of(const std::string& stage) const;
  std::size_t stage_count(int layer) const { return layers_.at(layer).size(); }
  // Runs the layer's stages in order. `outside` gives each tensor the layer reads from outside
  // itself ("inputs/*" come from the case's batch); `on_stage` sees every stage's outputs.
  // Progress on stderr: in place on a terminal, one line per layer.
  void run(int layer, const std::function<Tensor(const TensorRef&)>& outside,
           const std::function<void(const Stage&, const std::vector<Tensor>&)>& on_stage);

 private:
  std::map<int, std::vector<Stage>> layers_;
  std::map<std::string, int> layer_of_;
  ModelConfig config_;
  Batch batch_;
  TieRule rule_;
  WeightStore& weights_;
  std::unique_ptr<Backend> refcpu_;
};

}  // namespace tdiff
