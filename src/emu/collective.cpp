// The all-reduce orders of emu/collective.h.
#include "emu/collective.h"

#include <stdexcept>

namespace tdiff::emu {

std::vector<float> reduce_ranks(const std::vector<std::vector<float>>& x, const ReduceSpec& spec) {
  if (x.empty()) throw std::logic_error("reduce_ranks: no ranks");
  const int ranks = static_cast<int>(x.size());
  const auto n = static_cast<std::int64_t>(x[0].size());
  std::vector<float> out(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static)
  for (std::int64_t e = 0; e < n; ++e) {
    const auto i = static_cast<std::size_t>(e);
    const auto at = [&](int r) { return x[static_cast<std::size_t>(r)][i]; };
    out[i] = reduce_element(at, ranks, e, n, spec);
  }
  return out;
}

}  // namespace tdiff::emu
