#pragma once
// The compressors' gated pooling (model-spec §3.5), emu::gated_pool on the GPU for the batch:
//   P, Z [B, S, c·δ] (c = 2 when overlapping), pb [μ, c·δ] (float32 of the f64 weight),
//   start, length [B] (int64, device) -> out [B, ⌊S/μ⌋, δ]; row b pools ⌊length[b]/μ⌋ windows
//   starting at its first real token, later windows are 0.
//   Per (window, channel): logits Z + pb and the softmax over the slots in pool_softmax, the
//   weights rounded to storage, the weighted sum in float32 (slot order), stored in storage.
// spec: emu::pool_spec. One thread per (b, window, channel); channels contiguous, so P/Z reads coalesce.
#include <cstdint>

#include "emu/compressor.h"
#include "hip/vendor.h"

namespace tdiff::hip {

void gated_pool(const float* d_P, const float* d_Z, std::int64_t B, std::int64_t S, const std::int64_t* d_start,
                const std::int64_t* d_length, const float* d_pb, std::int64_t rate, std::int64_t width, bool overlap,
                const emu::PoolSpec& spec, float* d_out, hipStream_t stream);

}  // namespace tdiff::hip
