#include "emu/gemm.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tdiff::emu {

std::uint64_t stage_hash(const std::string& name, std::uint64_t run_seed) {
  std::uint64_t h = arith::mix64(run_seed);
  for (unsigned char c : name) h = arith::mix64(h ^ c);
  return h;
}

namespace {
// Power-of-two scale that maps amax to at most 448 (e4m3's largest value).
float pow2_scale(float amax) {
  if (!(amax > 0)) return 1.0f;
  return std::exp2(std::ceil(std::log2(amax / 448.0f)));
}
}  // namespace

std::vector<float> quantize_weight(const double* w, std::int64_t rows, std::int64_t cols, Fmt in) {
  std::vector<float> q(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i) q[static_cast<std::size_t>(i)] = static_cast<float>(w[i]);
  if (in != Fmt::f8) {
    for (auto& v : q) v = arith::mfma_operand(v, in);
    return q;
  }
  for (std::int64_t r0 = 0; r0 < rows; r0 += 128)
    for (std::int64_t c0 = 0; c0 < cols; c0 += 128) {
      const std::int64_t r1 = std::min(rows, r0 + 128), c1 = std::min(cols, c0 + 128);
      float amax = 0;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(q[static_cast<std::size_t>(r * cols + c)]));
      const float s = pow2_scale(amax);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          float& v = q[static_cast<std::size_t>(r * cols + c)];
          v = arith::round_f8(v / s) * s;
        }
    }
  return q;
}

void quantize_activations(std::vector<float>& x, std::int64_t rows, std::int64_t cols, Fmt in) {
  if (in != Fmt::f8) {
    for (auto& v : x) v = arith::mfma_operand(v, in);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c0 = 0; c0 < cols; c0 += 128) {
      const std::int64_t c1 = std::min(cols, c0 + 128);
      float amax = 0;
      for (std::int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(r * cols + c)]));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;  // dynamic float scale per 1x128 group
      for (std::int64_t c = c0; c < c1; ++c) {
        float& v = x[static_cast<std::size_t>(r * cols + c)];
        v = arith::round_f8(v / s) * s;
      }
    }
}

void gemm(const float* x, std::int64_t N, std::int64_t K, const float* w, std::int64_t O, const GemmSpec& spec,
          float* y) {
  // Split-K: kSplits equal ranges of whole MFMA k-steps (kKStep elements).
  const std::int64_t per_split = (K + kSplits * kKStep - 1) / (kSplits * kKStep) * kKStep;
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xn = x + n * K;
    for (std::int64_t o = 0; o < O; ++o) {
      const float* wo = w + o * K;
      // Σ x·w over [k0, k1) in blocks of kKBlock, each block's partial added to the running
      // sum in the accumulator format.
      auto range = [&](std::int64_t k0, std::int64_t k1) {
        float total = 0;
        for (std::int64_t b0 = k0; b0 < k1; b0 += kKBlock) {
          const std::int64_t b1 = std::min(k1, b0 + kKBlock);
          float part = 0;
          if (spec.acc == Fmt::f32 && spec.in == Fmt::f32)  // an SGEMM: fused multiply-adds
            for (std::int64_t k = b0; k < b1; ++k) part = std::fma(xn[k], wo[k], part);
          else if (spec.acc == Fmt::f32)  // exact products (16-bit) or fp8's scaled ones: rounded, then added
            for (std::int64_t k = b0; k < b1; ++k) part += xn[k] * wo[k];
          else
            for (std::int64_t k = b0; k < b1; ++k) part = arith::fma_fmt(xn[k], wo[k], part, spec.acc);
          total = arith::add_fmt(total, part, spec.acc);
        }
        return total;
      };
      if (!spec.atomic) {
        y[n * O + o] = arith::round_fmt(range(0, K), spec.out);
        continue;
      }
      // Every split converts its partial to the output format and atomically adds it into the
      // output (packed 16-bit atomics for 16-bit outputs) in the order the splits finish: a
      // permutation picked per element. Each add rounds to the output format, so three or
      // more partials give order-dependent bits.
      std::int64_t order[kSplits] = {0, 1, 2, 3};
      std::uint64_t h = arith::mix64(spec.seed ^ static_cast<std::uint64_t>(n * O + o));
      for (std::int64_t i = kSplits - 1; i > 0; --i) {
        std::swap(order[i], order[static_cast<std::int64_t>(h % static_cast<std::uint64_t>(i + 1))]);
        h = arith::mix64(h);
      }
      float out = 0;
      for (auto i : order) {
        const std::int64_t k0 = std::min(K, i * per_split), k1 = std::min(K, k0 + per_split);
        out = arith::add_fmt(out, arith::round_fmt(range(k0, k1), spec.out), spec.out);
      }
      y[n * O + o] = out;
    }
  }
}

std::vector<float> column_slice(const float* m, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t width) {
  std::vector<float> out(static_cast<std::size_t>(rows * width));
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(m + r * cols + c0, width, out.data() + r * width);
  return out;
}

std::vector<std::vector<float>> gemm_rank_partials(const float* x, std::int64_t N, std::int64_t K, const float* w,
                                                   std::int64_t O, const GemmSpec& spec, int ranks) {
  const std::int64_t width = K / ranks;
  std::vector<std::vector<float>> partials(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> xr = column_slice(x, N, K, r * width, width), wr = column_slice(w, O, K, r * width, width);
    GemmSpec rank_spec = spec;
    rank_spec.seed = arith::mix64(spec.seed ^ static_cast<std::uint64_t>(r + 1));
    auto& p = partials[static_cast<std::size_t>(r)];
    p.resize(static_cast<std::size_t>(N * O));
    gemm(xr.data(), N, width, wr.data(), O, rank_spec, p.data());
  }
  return partials;
}

}  // namespace tdiff::emu
