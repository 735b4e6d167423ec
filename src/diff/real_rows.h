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

namespace tdiff {

struct RealRows {
  std::int64_t rows = 0, row_size = 0;
  Shape inner;              // the dimensions of one row
  std::vector<bool> real;   // per row
  std::int64_t count() const;
};

// `rate`: the compression rate of the tensor's stage (0 for uncompressed stages).
RealRows real_rows(const Tensor& t, const Batch& b, std::int64_t rate);
// The real rows of `t` only, as [real rows, inner...] (same dtype; `t` itself when all are real).
Tensor keep_real_rows(const Tensor& t, const RealRows& rows);

// The batch's padding tokens (mask 0), which per-token statistics leave out for backends and
// dumps alike (pairing.h's token_view).
std::int64_t padding_tokens(const Batch& b);

}  // namespace tdiff
