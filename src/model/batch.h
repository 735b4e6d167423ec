#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

// The batch: token ids and the explicit token-level mask, with the derived real-token span of
// every row (real tokens are contiguous; padding is on the left or on the right).
struct Batch {
  Tensor ids;   // [B,S] i64
  Tensor mask;  // [B,S] u8, 1 = real token
  Tensor pos;   // [B,S] i64, position counted from the row's first real token
  std::vector<std::int64_t> start, length;  // per row
  std::int64_t rows() const { return ids.dim(0); }
  std::int64_t seq() const { return ids.dim(1); }
  // Validates ids against the vocabulary and the mask's shape and contiguity; derives pos,
  // start and length. `source` names the file in errors.
  static Batch make(Tensor ids, Tensor mask, std::int64_t vocab_size, const std::string& source);
};

// SHA-256 of the batch's token ids and mask (shape and values): what a dump records of the
// inputs it was written on (attribute case_inputs_sha256), so that a dump of other inputs is
// refused wherever the case file travelled.
std::string inputs_sha256(const Batch& b);

}  // namespace tdiff
