#pragma once
// The rows of a stage tensor that belong to real tokens of a padded batch. tdiff's backends
// compute padding positions exactly as the reference does, but another implementation may put
// anything there (transformers does), so external dumps are judged on real rows only.
//
// Row layouts, by the tensor's leading dimensions (B rows of S tokens):
//   [B, S, ...]   one row per token (hidden states, masks [B,S,S], scores [B,S,n]);
//   [B*S, ...]    one row per token (router scores, selections, expert outputs);
//   [B, n, ...]   compressed entries at rate r (CSA/HCA pools): entry w of a row is real when
//                 its r tokens are real, w in [ceil(start/r), (start+length)/r).
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "base/tensor.h"
#include "model/stage_graph.h"

namespace tdiff {

struct RealRows {
  std::int64_t rows = 0, row_size = 0;
  Shape inner;              // the dimensions of one row
  std::vector<bool> real;   // per row
  std::int64_t count() const;
};

// `rate`: the compression rate of the tensor's stage (0 for uncompressed stages).
RealRows real_rows(const Shape& shape, const Batch& b, std::int64_t rate);
inline RealRows real_rows(const Tensor& t, const Batch& b, std::int64_t rate) { return real_rows(t.shape(), b, rate); }
// The rate a stage's tensors are split into real rows at: its layer's compression rate (the
// dump's view and the locations of what it kept, diff/location.h, use this one rate).
std::int64_t real_rows_rate(const Stage& s, const ModelConfig& c);
// The real rows of `t` only, as [real rows, inner...] (same dtype; `t` itself when all are real).
Tensor keep_real_rows(const Tensor& t, const RealRows& rows);

// The batch's padding tokens (mask 0), which per-token statistics leave out for backends and
// dumps alike (pairing.h's token_view).
std::int64_t padding_tokens(const Batch& b);

}  // namespace tdiff
