#pragma once
// Stage outputs kept across mixed runs. A stage's output is a function of which backend ran
// the stage and each stage upstream of it (its ancestors in the stage graph), so that
// assignment, restricted to the stage and its ancestors, is the cache key: a bisection's
// mixed runs share most of their prefixes, and every stage then runs once per distinct
// upstream assignment instead of once per mixed run. Backends must be deterministic for a
// fixed run seed (emu is; a GPU's atomics freeze at their first realisation, which is what a
// bisection wants anyway).
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/stage_graph.h"
#include "base/tensor.h"

namespace tdiff {

class StageCache {
 public:
  // `budget_bytes`: stop storing new outputs once the cache holds this much.
  explicit StageCache(const std::vector<Stage>& stages, std::size_t budget_bytes = std::size_t{4} << 30);

  // Outputs of stage `index` under `on_candidate` (one flag per stage), or nullptr.
  const std::vector<Tensor>* find(std::size_t index, const std::vector<bool>& on_candidate) const;
  void put(std::size_t index, const std::vector<bool>& on_candidate, const std::vector<Tensor>& outputs);

  std::size_t bytes() const { return bytes_; }
  std::size_t entries() const { return map_.size(); }

 private:
  using Key = std::pair<std::size_t, std::vector<std::uint64_t>>;
  Key key(std::size_t index, const std::vector<bool>& on_candidate) const;

  std::vector<std::vector<std::uint64_t>> scope_;  // per stage: bitset of itself and its ancestors
  std::map<Key, std::vector<Tensor>> map_;
  std::size_t budget_, bytes_ = 0;
};

}  // namespace tdiff
