#pragma once
// The compressed-entry visibility of the reference (model-spec §4.4 step 30), exact booleans:
//   pos [B, S], length [B] (, sel [B, S, k], -1 = no pick) -> vis [B, S, n], zeroed by the caller:
//   HCA (sel null): vis[b, i, w] = w < min(⌊(pos + 1)/m⌋, ⌊length_b/m⌋)   (m = rate; pos < −1: none)
//   CSA:            vis[b, i, w] = w is one of token (b, i)'s picks (the indexer's top-k, causal already)
#include <cstdint>

namespace tdiff::refcpu {

void compressed_mask(const std::int64_t* pos, const std::int64_t* length, const std::int64_t* sel, std::int64_t B,
                     std::int64_t S, std::int64_t n, std::int64_t k, std::int64_t rate, std::uint8_t* vis);

}  // namespace tdiff::refcpu
