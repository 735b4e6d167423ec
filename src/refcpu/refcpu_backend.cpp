#include "refcpu/refcpu_backend.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "refcpu/attention.h"
#include "refcpu/compressor.h"
#include "refcpu/hyper_connection.h"
#include "refcpu/indexer.h"
#include "refcpu/linear.h"
#include "refcpu/moe.h"
#include "refcpu/norm.h"
#include "refcpu/rope.h"

namespace tdiff::refcpu {

namespace {

// Inputs arrive from the executor, possibly converted from another backend: float64 here.
const double* f64(const Tensor* t, const Stage& s, std::size_t i) {
  if (t->dtype() != DType::f64)
    throw std::logic_error(fmt::format("{}: input {} has dtype {}, refcpu needs f64", s.name, i, dtype_name(t->dtype())));
  return t->data<double>();
}
const std::int64_t* i64(const Tensor* t) { return t->data<std::int64_t>(); }
const std::uint8_t* u8(const Tensor* t) { return t->data<std::uint8_t>(); }

Shape with_last(Shape s, std::int64_t last) {
  s.back() = last;
  return s;
}

// Rows of a tensor when its last `trailing` dims are the row.
std::int64_t rows_of(const Tensor& t, int trailing = 1) {
  std::int64_t r = 1;
  for (int i = 0; i < t.rank() - trailing; ++i) r *= t.dim(i);
  return r;
}

}  // namespace

std::vector<Tensor> RefCpuBackend::run(const Stage& s, const std::vector<const Tensor*>& given, RunContext& ctx) {
  // A candidate's narrower float outputs (hip copies them as stored) widened exactly to float64.
  std::vector<Tensor> widened;
  widened.reserve(given.size());
  std::vector<const Tensor*> in = given;
  for (auto& t : in)
    if (t && is_float(t->dtype()) && t->dtype() != DType::f64) t = &widened.emplace_back(t->to(DType::f64));
  const ModelConfig& c = ctx.config;
  const Batch& batch = ctx.batch;
  WeightStore& W = ctx.weights;
  const std::int64_t B = batch.rows(), S = batch.seq(), N = B * S;
  auto weight = [&](std::size_t i) -> const Tensor& { return W.f64(s.weights.at(i)); };

  switch (s.kind) {
    case OpKind::embed: {
      const Tensor& E = weight(0);
      const auto D = c.hidden_size;
      Tensor e(DType::f64, {B, S, D});
      const auto* ids = i64(in[0]);
      for (std::int64_t t = 0; t < N; ++t)
        std::memcpy(e.data<double>() + t * D, E.data<double>() + ids[t] * D, static_cast<std::size_t>(D) * 8);
      return {e};
    }
    case OpKind::hc_expand: {
      const auto D = c.hidden_size, n = c.hc_mult;
      Tensor X(DType::f64, {B, S, n, D});
      const double* e = f64(in[0], s, 0);
      for (std::int64_t t = 0; t < N; ++t)
        for (std::int64_t k = 0; k < n; ++k)
          std::memcpy(X.data<double>() + (t * n + k) * D, e + t * D, static_cast<std::size_t>(D) * 8);
      return {X};
    }
    case OpKind::rope_table: {
      const auto half = c.rope_dim / 2;
      Tensor cs(DType::f64, {B, S, half}), sn(DType::f64, {B, S, half});
      auto freq = rope_frequencies(s.compress_rope ? c.rope_compress : c.rope_main, c.rope_dim);
      rope_tables(freq, i64(in[0]), N, cs.data<double>(), sn.data<double>());
      return {cs, sn};
    }
    case OpKind::window_mask: {
      Tensor m(DType::boolean, {B, S, S});
      auto* out = m.data<std::uint8_t>();
      const auto* mask = u8(in[0]);
      const auto Wn = c.sliding_window;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < S; ++i)
          for (std::int64_t j = 0; j < S; ++j)
            out[(b * S + i) * S + j] = (j > i - Wn && j <= i && mask[b * S + j]) ? 1 : 0;
      return {m};
    }
    case OpKind::hc_mix: {
      const Tensor& fn = weight(0);
      const auto M = c.hc_mix_width(), flat = c.hc_mult * c.hidden_size;
      Tensor mix(DType::f64, {B, S, M});
      hc_mix(f64(in[0], s, 0), N, flat, fn.data<double>(), M, c.rms_norm_eps, mix.data<double>());
      return {mix};
    }
    case OpKind::hc_sinkhorn: {
      const auto n = c.hc_mult;
      Tensor pre(DType::f64, {B, S, n}), post(DType::f64, {B, S, n}), comb(DType::f64, {B, S, n, n});
      hc_sinkhorn(f64(in[0], s, 0), N, n, weight(0).data<double>(), weight(1).data<double>(), c.hc_eps,
                  c.hc_sinkhorn_iters, pre.data<double>(), post.data<double>(), comb.data<double>());
      return {pre, post, comb};
    }
    case OpKind::hc_pre: {
      Tensor x(DType::f64, {B, S, c.hidden_size});
      hc_collapse(f64(in[0], s, 0), f64(in[1], s, 1), N, c.hc_mult, c.hidden_size, x.data<double>());
      return {x};
    }
    case OpKind::rms_norm: {
      const Tensor& x = *in[0];
      Tensor y(DType::f64, x.shape());
      rms_norm(f64(in[0], s, 0), rows_of(x), x.dim(-1), weight(0).data<double>(), c.rms_norm_eps, y.data<double>());
      return {y};
    }
    case OpKind::linear:
    case OpKind::lm_head: {
      const Tensor& x = *in[0];
      const Tensor& w = weight(0);
      const auto out = w.dim(0), rows = rows_of(x);
      Tensor y(DType::f64, with_last(x.shape(), out));
      linear(f64(in[0], s, 0), rows, x.dim(-1), w.data<double>(), out, y.data<double>());
      if (s.width > 0) {  // head-major split of the output features
        Shape hs = x.shape();
        hs.back() = out / s.width;
        hs.push_back(s.width);
        y = y.reshaped(hs);
      }
      return {y};
    }
    case OpKind::head_rms_norm: {
      const Tensor& x = *in[0];
      Tensor y(DType::f64, x.shape());
      rms_unweighted(f64(in[0], s, 0), rows_of(x), x.dim(-1), c.rms_norm_eps, y.data<double>());
      return {y};
    }
    case OpKind::rope:
    case OpKind::rope_inverse: {
      // x [B,S,(heads,)width]; every head of token t uses table row t.
      const Tensor& x = *in[0];
      const std::int64_t rows = rows_of(x), per_token = rows / N;
      std::vector<std::int64_t> table_row(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) table_row[static_cast<std::size_t>(r)] = r / per_token;
      Tensor y(DType::f64, x.shape());
      rope_rotate(f64(in[0], s, 0), rows, x.dim(-1), c.rope_dim, f64(in[1], s, 1), f64(in[2], s, 2), table_row.data(),
                  s.kind == OpKind::rope_inverse, y.data<double>());
      return {y};
    }
    case OpKind::cmp_proj: {
      const Tensor& h = *in[0];
      const Tensor &wp = weight(0), &wz = weight(1);
      Tensor P(DType::f64, with_last(h.shape(), wp.dim(0))), Z(DType::f64, with_last(h.shape(), wz.dim(0)));
      linear(f64(in[0], s, 0), N, h.dim(-1), wp.data<double>(), wp.dim(0), P.data<double>());
      linear(f64(in[0], s, 0), N, h.dim(-1), wz.data<double>(), wz.dim(0), Z.data<double>());
      return {P, Z};
    }
    case OpKind::pool: {
      const auto n = S / s.rate, width = s.width, stride = in[0]->dim(-1);
      Tensor out(DType::f64, {B, n, width});
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t off = (b * S + batch.start[static_cast<std::size_t>(b)]) * stride;
        gated_pool(f64(in[0], s, 0) + off, f64(in[1], s, 1) + off, batch.length[static_cast<std::size_t>(b)],
                   weight(0).data<double>(), s.rate, width, s.overlap, out.data<double>() + b * n * width);
      }
      return {out};
    }
    case OpKind::entry_rope: {
      const Tensor& x = *in[0];
      const auto n = x.dim(1);
      std::vector<std::int64_t> positions(static_cast<std::size_t>(n)), table_row(static_cast<std::size_t>(B * n));
      for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = w * s.rate;
      for (std::int64_t r = 0; r < B * n; ++r) table_row[static_cast<std::size_t>(r)] = r % n;
      const auto half = c.rope_dim / 2;
      std::vector<double> cs(static_cast<std::size_t>(n * half)), sn(cs.size());
      rope_tables(rope_frequencies(c.rope_compress, c.rope_dim), positions.data(), n, cs.data(), sn.data());
      Tensor y(DType::f64, x.shape());
      rope_rotate(f64(in[0], s, 0), B * n, x.dim(-1), c.rope_dim, cs.data(), sn.data(), table_row.data(), false,
                  y.data<double>());
      return {y};
    }
    case OpKind::idx_weights: {
      const Tensor& w = weight(0);
      const auto HI = w.dim(0);
      Tensor out(DType::f64, {B, S, HI});
      linear(f64(in[0], s, 0), N, c.hidden_size, w.data<double>(), HI, out.data<double>());
      const double scale = 1.0 / std::sqrt(static_cast<double>(HI));
      for (double& v : out.span<double>()) v *= scale;
      return {out};
    }
    case OpKind::idx_score: {
      const Tensor &QI = *in[0], &KI = *in[1];
      const auto n = KI.dim(1), HI = QI.dim(2), dI = QI.dim(3);
      Tensor score(DType::f64, {B, S, n});
      for (std::int64_t b = 0; b < B; ++b)
        indexer_scores(f64(in[0], s, 0) + b * S * HI * dI, f64(in[1], s, 1) + b * n * dI,
                       f64(in[2], s, 2) + b * S * HI, i64(in[3]) + b * S, S, n,
                       batch.length[static_cast<std::size_t>(b)] / s.rate, HI, dI, s.rate,
                       score.data<double>() + b * S * n);
      return {score};
    }
    case OpKind::idx_topk: {
      const auto n = in[0]->dim(2), k = std::min(c.index_topk, n);
      Tensor sel(DType::i64, {B, S, k});
      const auto* pos = i64(in[1]);
#pragma omp parallel for schedule(static)
      for (std::int64_t t = 0; t < N; ++t) {
        const std::int64_t b = t / S;
        const std::int64_t causal = std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / s.rate : 0,
                                             batch.length[static_cast<std::size_t>(b)] / s.rate);
        topk_select(f64(in[0], s, 0) + t * n, n, k, causal, ctx.tie_rule, sel.data<std::int64_t>() + t * k);
      }
      return {sel};
    }
    case OpKind::cmp_mask: {
      const auto n = in[0]->dim(1);
      Tensor m(DType::boolean, {B, S, n});
      auto* out = m.data<std::uint8_t>();
      const auto* pos = i64(in[1]);
      for (std::int64_t t = 0; t < N; ++t) {
        const std::int64_t b = t / S;
        const std::int64_t causal = std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / s.rate : 0,
                                             batch.length[static_cast<std::size_t>(b)] / s.rate);
        if (in.size() > 2) {  // CSA: the indexer's selection (already causal)
          const auto k = in[2]->dim(2);
          for (std::int64_t j = 0; j < k; ++j) {
            const auto w = i64(in[2])[t * k + j];
            if (w >= 0) out[t * n + w] = 1;
          }
        } else {
          for (std::int64_t w = 0; w < causal; ++w) out[t * n + w] = 1;
        }
      }
      return {m};
    }
    case OpKind::attention: {
      const auto H = c.num_attention_heads, d = c.head_dim;
      Tensor o(DType::f64, {B, S, H, d});
      const bool compressed = in.size() > 3;
      const auto n = compressed ? in[3]->dim(1) : 0;
      for (std::int64_t b = 0; b < B; ++b)
        attention_row(f64(in[0], s, 0) + b * S * H * d, f64(in[1], s, 1) + b * S * d, u8(in[2]) + b * S * S,
                      compressed ? f64(in[3], s, 3) + b * n * d : nullptr, compressed ? u8(in[4]) + b * S * n : nullptr,
                      S, n, H, d, weight(0).data<double>(), o.data<double>() + b * S * H * d);
      return {o};
    }
    case OpKind::grouped_linear: {
      const Tensor& w = weight(0);
      const auto G = c.o_groups, Ro = c.o_lora_rank, per = c.num_attention_heads * c.head_dim / G;
      Tensor y(DType::f64, {B, S, G * Ro});
      grouped_linear(f64(in[0], s, 0), N, G, per, w.data<double>(), Ro, y.data<double>());
      return {y};
    }
    case OpKind::hc_post: {
      Tensor X(DType::f64, in[0]->shape());
      hc_post(f64(in[0], s, 0), f64(in[1], s, 1), f64(in[2], s, 2), f64(in[3], s, 3), N, c.hc_mult, c.hidden_size,
              X.data<double>());
      return {X};
    }
    case OpKind::router: {
      const Tensor& w = weight(0);
      const auto E = w.dim(0);
      Tensor logit(DType::f64, {N, E}), score(DType::f64, {N, E});
      linear(f64(in[0], s, 0), N, c.hidden_size, w.data<double>(), E, logit.data<double>());
      router_scores(logit.data<double>(), N * E, score.data<double>());
      return {logit, score};
    }
    case OpKind::moe_select: {
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      Tensor idx(DType::i64, {N, K});
      auto* out = idx.data<std::int64_t>();
      if (in.size() > 1) {  // hash routing: the expert ids of the token id
        const Tensor& table = W.i64(s.weights.at(0));
        const auto* ids = i64(in[1]);
        for (std::int64_t t = 0; t < N; ++t)
          for (std::int64_t k = 0; k < K; ++k) out[t * K + k] = table.data<std::int64_t>()[ids[t] * K + k];
      } else {  // the routing bias only chooses; it never weighs
        const double* bias = weight(0).data<double>();
        const double* score = f64(in[0], s, 0);
#pragma omp parallel for schedule(static)
        for (std::int64_t t = 0; t < N; ++t) {
          std::vector<double> biased(static_cast<std::size_t>(E));
          for (std::int64_t e = 0; e < E; ++e) biased[static_cast<std::size_t>(e)] = score[t * E + e] + bias[e];
          topk_indices(biased.data(), E, K, ctx.tie_rule, out + t * K);
        }
      }
      return {idx};
    }
    case OpKind::moe_weights: {
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      Tensor wt(DType::f64, {N, K});
      routing_weights(f64(in[0], s, 0), i64(in[1]), N, E, K, c.routed_scaling_factor, wt.data<double>());
      return {wt};
    }
    case OpKind::moe_experts: {
      const auto D = c.hidden_size, K = c.num_experts_per_tok;
      Tensor routed(DType::f64, {N, D});
      routed_experts(f64(in[0], s, 0), N, D, i64(in[1]), f64(in[2], s, 2), K, weight(0).data<double>(),
                     weight(1).data<double>(), c.n_routed_experts, c.moe_intermediate_size, c.swiglu_limit,
                     routed.data<double>());
      return {routed};
    }
    case OpKind::moe_shared: {
      const auto D = c.hidden_size;
      Tensor y(DType::f64, {N, D});
      swiglu_ffn(f64(in[0], s, 0), N, D, weight(0).data<double>(), weight(1).data<double>(), weight(2).data<double>(),
                 c.moe_intermediate_size, c.swiglu_limit, y.data<double>());
      return {y};
    }
    case OpKind::add: {
      Tensor f(DType::f64, in[2]->shape());
      const double *a = f64(in[0], s, 0), *b = f64(in[1], s, 1);
      double* out = f.data<double>();
      for (std::int64_t i = 0; i < f.numel(); ++i) out[i] = a[i] + b[i];
      return {f};
    }
    case OpKind::hc_head: {
      const auto n = c.hc_mult, D = c.hidden_size;
      Tensor y(DType::f64, {B, S, D}), preh(DType::f64, {B, S, n});
      hc_head_weights(f64(in[0], s, 0), N, n, D, weight(0).data<double>(), weight(1).data<double>(),
                      weight(2).data<double>(), c.rms_norm_eps, c.hc_eps, preh.data<double>());
      hc_collapse(f64(in[0], s, 0), preh.data<double>(), N, n, D, y.data<double>());
      return {y, preh};
    }
  }
  throw std::logic_error(fmt::format("refcpu: no implementation for stage {} ({})", s.name, op_kind_name(s.kind)));
}

}  // namespace tdiff::refcpu
