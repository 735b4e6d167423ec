#pragma once
// The cache a generation step runs against (model-spec §10.2, docs/design/generation.md §2),
// laid out as engines lay it out. Per layer:
//   window    a ring of W slots of the layer's `attn.kv_rope` rows [B, W, d]: token p in slot
//             p mod W (DeepSeek's layout). A decode step writes its row, then its query reads
//             the W slots in slot order; a prefill chunk reads the ring as it was, then its own
//             rows ([B, W + T, d]: engines attend a chunk over cache and chunk), then writes them.
//   per compressor (`attn.cmp.pool`, and the indexer's `attn.idx.pool` on CSA layers):
//     rows     the cmp_proj rows (P, Z) pooling still needs, from a window start: the open
//              window (`seen mod m` rows) and, on CSA, the last finished window for its A half
//     entries  the finished entries after entry_rope [B, n, δ], entry w rotated at w·m
// The cache holds what the candidate's own stages produced (in their storage format), never
// the reference's, so every step reads the candidate's earlier outputs as an engine does.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

class GenerationCache {
 public:
  // `rows`: the batch rows B; `window`: W.
  GenerationCache(std::int64_t rows, std::int64_t window);

  // A step over positions [begin, end): `decode` for one token against the cache.
  void begin_step(std::int64_t begin, std::int64_t end, bool decode);
  void end_step();
  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }

  // The positions of the step's K keys (−1: an empty slot), in the order window_keys lays
  // them out, and the visibility of the step's T queries over them [B, T, K] (u8): key
  // position kp is visible to query position q when q − W < kp ≤ q.
  const std::vector<std::int64_t>& key_positions() const { return key_pos_; }
  Tensor window_visibility() const;
  // The keys of `layer`'s attention for this step from the step's new rows [B, T, d] (f64),
  // which it writes into the layer's ring (once per layer and step).
  Tensor window_keys(int layer, const Tensor& new_rows);

  // Pooling: the rows a compressor's pool stage reads this step, [B, r + T, c] for P and for Z
  // (the cached rows before the step's own), their first position (a window start), and what
  // the cache keeps of them afterwards. `pool` names the stage, `rate` m, `overlap` CSA.
  struct PoolSpan {
    Tensor P, Z;
    std::int64_t first_position = 0;
    std::int64_t entries_before = 0;  // the compressor's entries before this step
  };
  PoolSpan pool_span(const std::string& pool, const Tensor& P, const Tensor& Z);
  // After the pool stage ran on pool_span's rows [B, n_span, δ]: keeps the rows the next step
  // needs and returns the step's new entries [B, n_new, δ] (n_new may be 0).
  Tensor pooled(const std::string& pool, std::int64_t rate, bool overlap, const Tensor& span_entries);
  // The compressor's entries before this step (RunContext::first_entry of its entry_rope).
  std::int64_t entries_before(const std::string& pool) const;
  // Appends the step's rotated entries [B, n_new, δ] of `pool`'s compressor and returns all of
  // them [B, n, δ]: what attention, cmp_mask and the indexer read.
  const Tensor& add_entries(const std::string& pool, const Tensor& rotated);
  const Tensor& entries(const std::string& pool) const;

 private:
  struct Compressor {
    Tensor P, Z;                    // [B, r, c] from rows_begin
    std::int64_t rows_begin = 0;    // a window start
    std::int64_t entries_at_step = 0;  // entries before the current step
    Tensor entries;                 // [B, n, δ] rotated
    Tensor span_P, span_Z;          // the current step's pool_span, until pooled()
  };
  Compressor& compressor(const std::string& pool);

  std::int64_t B_, W_;
  std::int64_t begin_ = 0, end_ = 0;
  bool decode_ = false;
  std::vector<std::int64_t> slot_pos_;  // the ring's positions per slot, −1 empty (every layer alike)
  std::vector<std::int64_t> key_pos_;
  std::map<int, Tensor> rings_;         // layer -> [B, W, d]
  std::map<std::string, Compressor> compressors_;
};

// Rows [r0, r1) of dimension 1 of a [B, R, ...] tensor, and the concatenation along dimension 1
// of two tensors alike in every other dimension (either may be undefined or empty).
Tensor rows_of_dim1(const Tensor& t, std::int64_t r0, std::int64_t r1);
Tensor concat_dim1(const Tensor& a, const Tensor& b);

}  // namespace tdiff
