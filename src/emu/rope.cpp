#include "emu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "emu/stage_call.h"

namespace tdiff::emu {

std::vector<float> rope_frequencies(const RopeTable& t, std::int64_t r) {
  const std::int64_t half = r / 2;
  std::vector<float> w(static_cast<std::size_t>(half));
  for (std::int64_t f = 0; f < half; ++f) {
    const float e = static_cast<float>(2 * f) / static_cast<float>(r);
    w[static_cast<std::size_t>(f)] = 1.0f / std::pow(static_cast<float>(t.theta), e);
  }
  if (!t.yarn) return w;
  const double rd = static_cast<double>(r), L0 = t.original_max_position_embeddings;
  auto corr = [&](double nu) { return rd * std::log(L0 / (2 * std::numbers::pi * nu)) / (2 * std::log(t.theta)); };
  double lo = std::max(std::floor(corr(t.beta_fast)), 0.0), hi = std::min(std::ceil(corr(t.beta_slow)), rd - 1);
  if (lo == hi) hi += 0.001;
  for (std::int64_t f = 0; f < half; ++f) {
    const float g = static_cast<float>(std::clamp((static_cast<double>(f) - lo) / (hi - lo), 0.0, 1.0));
    float& om = w[static_cast<std::size_t>(f)];
    om = (1 - g) * om + g * (om / static_cast<float>(t.factor));
  }
  return w;
}

namespace {
// Fast-math sine/cosine: reduce by a float32 2π (the reduction error grows with |x|).
float fast_reduce(float x) {
  constexpr float two_pi = 6.28318548f;
  return x - two_pi * std::nearbyint(x / two_pi);
}
}  // namespace

void rope_tables(const std::vector<float>& freq, const std::int64_t* positions, std::int64_t n, RopeAngle angle,
                 float* cos_out, float* sin_out) {
  const auto half = static_cast<std::int64_t>(freq.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t f = 0; f < half; ++f) {
      float phi = static_cast<float>(positions[i]) * freq[static_cast<std::size_t>(f)];
      if (angle == RopeAngle::bf16) phi = arith::round_bf16(phi);
      if (angle == RopeAngle::f16) phi = arith::round_f16(phi);
      if (angle == RopeAngle::fast) phi = fast_reduce(phi);
      cos_out[i * half + f] = std::cos(phi);
      sin_out[i * half + f] = std::sin(phi);
    }
}

void rope_rotate(const float* x, std::int64_t rows, std::int64_t width, std::int64_t r, const float* cos_t,
                 const float* sin_t, const std::int64_t* table_row, bool inverse, Fmt out, float* y) {
  const std::int64_t half = r / 2, dn = width - r;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * width;
    float* yi = y + i * width;
    for (std::int64_t c = 0; c < dn; ++c) yi[c] = arith::round_fmt(xi[c], out);
    const float* cs = cos_t + table_row[i] * half;
    const float* sn = sin_t + table_row[i] * half;
    for (std::int64_t f = 0; f < half; ++f) {
      const float a = xi[dn + 2 * f], b = xi[dn + 2 * f + 1], c = cs[f], s = sign * sn[f];
      yi[dn + 2 * f] = arith::round_fmt(a * c - b * s, out);
      yi[dn + 2 * f + 1] = arith::round_fmt(a * s + b * c, out);
    }
  }
}

RopeSpec rope_spec(const Numerics& num) { return {num.rope_angle, fmt_of(num.storage)}; }

namespace {

std::vector<Tensor> run_rope_table(StageCall& k) {
  const auto half = k.c.rope_dim / 2;
  const RopeSpec spec = rope_spec(k.num);
  std::vector<float> cs(static_cast<std::size_t>(k.N * half)), sn(cs.size());
  rope_tables(rope_frequencies(k.s.compress_rope ? k.c.rope_compress : k.c.rope_main, k.c.rope_dim),
              k.in[0]->data<std::int64_t>(), k.N, spec.angle, cs.data(), sn.data());
  return {store(cs, {k.B, k.S, half}), store(sn, {k.B, k.S, half})};
}

// rope / rope_inverse: x [tokens, ..., width], every row rotated at its token's table row.
std::vector<Tensor> run_rope(StageCall& k) {
  const Tensor& x = *k.in[0];
  const RopeSpec spec = rope_spec(k.num);
  const std::int64_t rows = rows_of(x), per_token = rows / k.N;
  std::vector<std::int64_t> row(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) row[static_cast<std::size_t>(r)] = r / per_token;
  std::vector<float> y(static_cast<std::size_t>(x.numel()));
  rope_rotate(k.load(0, spec.out).data(), rows, x.dim(-1), k.c.rope_dim, k.load_f32(1).data(), k.load_f32(2).data(),
              row.data(), k.s.kind == OpKind::rope_inverse, spec.out, y.data());
  return {store(y, x.shape())};
}

// Compressed entries [B, n, width] rotated at their positions w · rate (tables of their own).
std::vector<Tensor> run_entry_rope(StageCall& k) {
  const Tensor& x = *k.in[0];
  const RopeSpec spec = rope_spec(k.num);
  const auto n = x.dim(1), half = k.c.rope_dim / 2, B = k.B;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n)), row(static_cast<std::size_t>(B * n));
  for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = (k.ctx.first_entry + w) * k.s.rate;
  for (std::int64_t r = 0; r < B * n; ++r) row[static_cast<std::size_t>(r)] = r % n;
  std::vector<float> cs(static_cast<std::size_t>(n * half)), sn(cs.size()), y(static_cast<std::size_t>(x.numel()));
  rope_tables(rope_frequencies(k.c.rope_compress, k.c.rope_dim), positions.data(), n, spec.angle, cs.data(), sn.data());
  rope_rotate(k.load(0, spec.out).data(), B * n, x.dim(-1), k.c.rope_dim, cs.data(), sn.data(), row.data(), false, spec.out,
              y.data());
  return {store(y, x.shape())};
}

}  // namespace

void register_rope(Handlers& h) {
  h.add(OpKind::rope_table, run_rope_table);
  h.add({OpKind::rope, OpKind::rope_inverse}, run_rope);
  h.add(OpKind::entry_rope, run_entry_rope);
}

}  // namespace tdiff::emu
