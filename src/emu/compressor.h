#pragma once
// The emu model of the compressors' gated pooling (model-spec §3.5): logits Z + pb and the
// softmax over the window slots in the pool_softmax format, the weights rounded to the
// storage format (as HF casts them back to the value dtype), the weighted sum in float32,
// the entry stored in the storage format.
#include <cstdint>

#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

// The pooling knobs as the kernels take them (emu and hip): the gate softmax in pool_softmax,
// weights and entries stored in storage.
struct PoolSpec {
  Fmt softmax, st;
};
PoolSpec pool_spec(const Numerics& num);

void gated_pool(const float* P, const float* Z, std::int64_t len, const double* pb, std::int64_t rate,
                std::int64_t width, bool overlap, const Numerics& num, float* out);

}  // namespace tdiff::emu
