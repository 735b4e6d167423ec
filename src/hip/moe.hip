// MoE kernels (moe.h).
#include "hip/vendor.h"  // first: the device memcpy that emu/arith.h uses
#include "hip/moe.h"

#include "hip/kernel_common.h"

namespace tdiff::hip {

namespace {

__device__ inline std::int64_t global_id() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

// expf as the host computes it (arith::exp_f32: glibc's algorithm on the device); log1p in
// double rounded to float, the correctly rounded value (glibc's log1pf is within an ulp).
__device__ inline float exp_f(float x) { return arith::exp_f32(x); }
__device__ inline float log1p_f(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

__global__ void scores_kernel(const float* logit, std::int64_t n, Fmt f, float* score) {
  const std::int64_t i = global_id();
  if (i >= n) return;
  const float x = logit[i];
  score[i] = arith::round_fmt(sqrtf(x > 20.0f ? x : log1p_f(exp_f(x))), f);
}

__global__ void weights_kernel(const float* score, const std::int64_t* idx, const float* bias, std::int64_t N,
                               std::int64_t E, std::int64_t K, bool norm_eps, float scale, float* wt) {
  const std::int64_t t = global_id();
  if (t >= N) return;
  auto g = [&](std::int64_t k) {
    const std::int64_t e = idx[t * K + k];
    return add_rn(score[t * E + e], bias ? bias[e] : 0.0f);
  };
  float sum = 0;
  for (std::int64_t k = 0; k < K; ++k) sum = add_rn(sum, g(k));
  const float den = norm_eps ? add_rn(sum, 1e-20f) : sum;
  for (std::int64_t k = 0; k < K; ++k) wt[t * K + k] = mul_rn(g(k) / den, scale);
}

__global__ void hash_kernel(const std::int64_t* ids, const std::int64_t* table, std::int64_t N, std::int64_t V,
                            std::int64_t K, std::int64_t* idx) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * K) return;
  const std::int64_t id = ids[i / K];
  idx[i] = (id >= 0 && id < V) ? table[id * K + i % K] : -1;
}

// One wavefront per expert: its lanes stride over the slots; a ballot counts the expert's
// (pass 1), then, after one thread's scan, lists them in slot order (pass 2, each hit placed
// by the hits of lower lanes).
__global__ void rows_kernel(const std::int64_t* idx, std::int64_t NK, std::int64_t E, std::int32_t* starts,
                            std::int32_t* rows) {
  const std::int64_t e = global_id() / kWaveSize;
  const int lane = static_cast<int>(threadIdx.x % kWaveSize);
  if (e >= E) return;  // the whole wavefront
  std::int32_t c = 0;
  for (std::int64_t r0 = 0; r0 < NK; r0 += kWaveSize)
    c += __popcll(TDIFF_BALLOT(r0 + lane < NK && idx[r0 + lane] == e));
  if (lane == 0) starts[e + 1] = c;
}
__global__ void scan_kernel(std::int32_t* starts, std::int64_t E) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  starts[0] = 0;
  for (std::int64_t e = 0; e < E; ++e) starts[e + 1] += starts[e];
}
__global__ void fill_kernel(const std::int64_t* idx, std::int64_t NK, std::int64_t E, const std::int32_t* starts,
                            std::int32_t* rows) {
  const std::int64_t e = global_id() / kWaveSize;
  const int lane = static_cast<int>(threadIdx.x % kWaveSize);
  if (e >= E) return;
  std::int32_t p = starts[e];
  const unsigned long long below = (1ull << lane) - 1;
  for (std::int64_t r0 = 0; r0 < NK; r0 += kWaveSize) {
    const bool hit = r0 + lane < NK && idx[r0 + lane] == e;
    const unsigned long long mask = TDIFF_BALLOT(hit);
    if (hit) rows[p + __popcll(mask & below)] = static_cast<std::int32_t>(r0 + lane);
    p += __popcll(mask);
  }
}
__global__ void swiglu_kernel(const float* gu, std::int64_t rows, std::int64_t I, bool clip, float limit, Fmt st,
                              float* h) {
  const std::int64_t i = global_id();
  if (i >= rows * I) return;
  const std::int64_t r = i / I, c = i % I;
  float g = gu[r * 2 * I + c], u = gu[r * 2 * I + I + c];
  if (clip) g = fminf(g, limit), u = fminf(fmaxf(u, -limit), limit);
  h[i] = arith::round_fmt(mul_rn(g / add_rn(1.0f, exp_f(-g)), u), st);
}

__global__ void combine_kernel(const float* slot, const float* wt, std::int64_t N, std::int64_t K, std::int64_t D,
                               Fmt st, const std::int64_t* idx, std::int64_t per_rank, float* out) {
  const std::int64_t i = global_id();
  if (i >= N * D) return;
  const std::int64_t t = i / D, ch = i % D;
  float acc = 0;
  if (per_rank == 0) {
    for (std::int64_t k = 0; k < K; ++k) acc = add_rn(acc, mul_rn(wt[t * K + k], slot[(t * K + k) * D + ch]));
  } else {  // owning ranks in increasing order, slots in k order within one (emu's stable sort)
    std::int64_t done = -1;
    for (;;) {
      std::int64_t owner = -1;
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t q = idx[t * K + k] / per_rank;
        if (q > done && (owner < 0 || q < owner)) owner = q;
      }
      if (owner < 0) break;
      for (std::int64_t k = 0; k < K; ++k)
        if (idx[t * K + k] / per_rank == owner) acc = add_rn(acc, mul_rn(wt[t * K + k], slot[(t * K + k) * D + ch]));
      done = owner;
    }
  }
  out[i] = arith::round_fmt(acc, st);
}
__global__ void combine_atomic_kernel(const float* slot, const float* wt, std::int64_t N, std::int64_t K,
                                      std::int64_t D, Fmt st, float* out) {
  const std::int64_t i = global_id();
  if (i >= N * K * D) return;
  const std::int64_t tk = i / D, ch = i % D, t = tk / K;
  atomic_add_fmt(&out[t * D + ch], arith::round_fmt(mul_rn(wt[tk], slot[i]), st), st);
}

}  // namespace

void hash_route(const std::int64_t* d_ids, const std::int64_t* d_table, std::int64_t N, std::int64_t V, std::int64_t K,
                std::int64_t* d_idx, hipStream_t stream) {
  if (N * K == 0) return;
  hash_kernel<<<blocks_for(N * K, 256), 256, 0, stream>>>(d_ids, d_table, N, V, K, d_idx);
  check_kernel("hash_route");
}

void router_scores(const float* d_logit, std::int64_t count, Fmt f, float* d_score, hipStream_t stream) {
  if (count == 0) return;
  scores_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(d_logit, count, f, d_score);
  check_kernel("router_scores");
}
void moe_weights(const float* d_score, const std::int64_t* d_idx, const float* d_bias, std::int64_t N, std::int64_t E,
                 std::int64_t K, bool norm_eps, float scale, float* d_wt, hipStream_t stream) {
  if (N == 0) return;
  weights_kernel<<<blocks_for(N, 128), 128, 0, stream>>>(d_score, d_idx, d_bias, N, E, K, norm_eps, scale, d_wt);
  check_kernel("moe_weights");
}
void expert_rows(const std::int64_t* d_idx, std::int64_t NK, std::int64_t E, std::int32_t* d_starts,
                 std::int32_t* d_rows, hipStream_t stream) {
  rows_kernel<<<blocks_for(E * kWaveSize, 256), 256, 0, stream>>>(d_idx, NK, E, d_starts, d_rows);
  check_kernel("expert_rows count");
  scan_kernel<<<1, 1, 0, stream>>>(d_starts, E);
  check_kernel("expert_rows scan");
  fill_kernel<<<blocks_for(E * kWaveSize, 256), 256, 0, stream>>>(d_idx, NK, E, d_starts, d_rows);
  check_kernel("expert_rows fill");
}
void swiglu(const float* d_gu, std::int64_t rows, std::int64_t I, bool clip, float limit, Fmt st, float* d_h,
            hipStream_t stream) {
  if (rows * I == 0) return;
  swiglu_kernel<<<blocks_for(rows * I, 256), 256, 0, stream>>>(d_gu, rows, I, clip, limit, st, d_h);
  check_kernel("swiglu");
}
void combine(const float* d_slot_out, const float* d_wt, std::int64_t N, std::int64_t K, std::int64_t D, bool atomic,
             Fmt st, float* d_out, hipStream_t stream, const std::int64_t* d_idx, std::int64_t experts_per_rank) {
  if (N * D == 0) return;
  if (!atomic) {
    const std::int64_t per_rank = d_idx ? experts_per_rank : 0;
    combine_kernel<<<blocks_for(N * D, 256), 256, 0, stream>>>(d_slot_out, d_wt, N, K, D, st, d_idx, per_rank, d_out);
    check_kernel("combine");
    return;
  }
  if (hipMemsetAsync(d_out, 0, static_cast<std::size_t>(N * D) * sizeof(float), stream) != hipSuccess)
    check_kernel("combine: zeroing");
  combine_atomic_kernel<<<blocks_for(N * K * D, 256), 256, 0, stream>>>(d_slot_out, d_wt, N, K, D, st, d_out);
  check_kernel("combine atomic");
}

}  // namespace tdiff::hip
