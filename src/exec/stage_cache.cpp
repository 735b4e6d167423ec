#include "exec/stage_cache.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tdiff {

StageCache::StageCache(const std::vector<Stage>& stages, std::size_t budget_bytes) : budget_(budget_bytes) {
  const std::size_t words = (stages.size() + 63) / 64;
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < stages.size(); ++i) index[stages[i].name] = i;
  scope_.assign(stages.size(), std::vector<std::uint64_t>(words, 0));
  for (std::size_t i = 0; i < stages.size(); ++i) {
    auto& s = scope_[i];
    s[i / 64] |= std::uint64_t{1} << (i % 64);
    for (const auto& in : stages[i].inputs) {
      if (in.stage == "inputs") continue;
      const auto it = index.find(in.stage);
      // Stages only read earlier stages, so their scopes are complete already.
      if (it == index.end() || it->second >= i) throw std::logic_error("stage " + stages[i].name + " reads " + in.key() + " before it is computed");
      for (std::size_t w = 0; w < words; ++w) s[w] |= scope_[it->second][w];
    }
  }
}

StageCache::Key StageCache::key(std::size_t index, const std::vector<bool>& on_candidate) const {
  const auto& scope = scope_.at(index);
  std::vector<std::uint64_t> bits(scope.size(), 0);
  for (std::size_t j = 0; j <= index && j < on_candidate.size(); ++j)
    if (on_candidate[j]) bits[j / 64] |= std::uint64_t{1} << (j % 64);
  for (std::size_t w = 0; w < bits.size(); ++w) bits[w] &= scope[w];
  return {index, std::move(bits)};
}

const std::vector<Tensor>* StageCache::find(std::size_t index, const std::vector<bool>& on_candidate) const {
  const auto it = map_.find(key(index, on_candidate));
  return it == map_.end() ? nullptr : &it->second;
}

void StageCache::put(std::size_t index, const std::vector<bool>& on_candidate, const std::vector<Tensor>& outputs) {
  std::size_t size = 0;
  for (const auto& t : outputs) size += t.nbytes();
  if (bytes_ + size > budget_) return;
  if (map_.emplace(key(index, on_candidate), outputs).second) bytes_ += size;
}

}  // namespace tdiff
