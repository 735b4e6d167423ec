#include "model/batch.h"

#include <fmt/format.h>

#include "base/error.h"
#include "base/sha256.h"

namespace tdiff {

Batch Batch::make(Tensor ids, Tensor mask, std::int64_t vocab_size, const std::string& source) {
  if (ids.rank() != 2) input_error("{}: token ids must be [B,S], got {}", source, shape_str(ids.shape()));
  if (mask.shape() != ids.shape())
    input_error("{}: attention mask shape {} differs from token ids shape {}", source, shape_str(mask.shape()),
                shape_str(ids.shape()));
  Batch b;
  b.ids = ids.dtype() == DType::i64 ? ids : ids.to(DType::i64);
  b.mask = mask.dtype() == DType::u8 ? mask : mask.to(DType::u8);
  const auto B = b.ids.dim(0), S = b.ids.dim(1);
  if (B == 0 || S == 0) input_error("{}: empty batch {}", source, shape_str(ids.shape()));
  const auto* id = b.ids.data<std::int64_t>();
  const auto* m = b.mask.data<std::uint8_t>();
  b.pos = Tensor(DType::i64, {B, S});
  auto* pos = b.pos.data<std::int64_t>();
  for (std::int64_t r = 0; r < B; ++r) {
    std::int64_t first = -1, count = 0;
    for (std::int64_t i = 0; i < S; ++i) {
      const auto v = m[r * S + i];
      if (v > 1) input_error("{}: attention mask row {} holds {} (only 0 and 1 allowed)", source, r, int(v));
      if (v) {
        if (first < 0) first = i;
        else if (!m[r * S + i - 1]) input_error("{}: attention mask row {} is not contiguous (padding only on the left or right)", source, r);
        ++count;
      }
      if (id[r * S + i] < 0 || id[r * S + i] >= vocab_size)
        input_error("{}: token id {} at [{},{}] is outside the vocabulary 0..{}", source, id[r * S + i], r, i, vocab_size - 1);
    }
    if (count == 0) input_error("{}: row {} has no real token (all padding)", source, r);
    b.start.push_back(first);
    b.length.push_back(count);
    for (std::int64_t i = 0; i < S; ++i) pos[r * S + i] = i - first;
  }
  return b;
}

std::string inputs_sha256(const Batch& b) {
  Sha256 h;
  const std::int64_t shape[2] = {b.rows(), b.seq()};
  h.add(shape, sizeof shape);
  for (std::int64_t i = 0; i < b.ids.numel(); ++i) {  // as i64 and u8 whatever they were read as
    const std::int64_t id = b.ids.data<std::int64_t>()[i];
    const std::uint8_t m = b.mask.data<std::uint8_t>()[i];
    h.add(&id, sizeof id);
    h.add(&m, sizeof m);
  }
  return h.hex();
}

}  // namespace tdiff
