#include "emu/emu_backend.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "emu/attention.h"
#include "emu/compressor.h"
#include "emu/gemm.h"
#include "emu/hyper_connection.h"
#include "emu/norm.h"
#include "emu/rope.h"
#include "emu/topk.h"

namespace tdiff::emu {

namespace {

// An input activation as the kernel reads it: float values in the storage format (a float64
// tensor from the reference is converted at the boundary).
std::vector<float> load(const Tensor* t, Fmt f) {
  std::vector<float> v(static_cast<std::size_t>(t->numel()));
  if (t->dtype() == DType::f32) {  // a candidate's float32 output (hip copies them as stored)
    const float* d = t->data<float>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = arith::round_fmt(d[i], f);
    return v;
  }
  const double* d = t->data<double>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = arith::round_fmt(static_cast<float>(d[i]), f);
  return v;
}
std::vector<float> load_exact(const Tensor* t) { return load(t, Fmt::f32); }

Tensor store(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::f64, std::move(shape));
  double* d = t.data<double>();
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = v[i];
  return t;
}

std::vector<float> to_float(const Tensor& w) {
  std::vector<float> v(static_cast<std::size_t>(w.numel()));
  const double* d = w.data<double>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(d[i]);
  return v;
}

std::int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

}  // namespace

const std::vector<float>& EmuBackend::gemm_weight(WeightStore& w, const std::string& name, Fmt in) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(name, static_cast<int>(in));
  auto it = weight_cache_.find(key);
  if (it != weight_cache_.end()) return it->second;
  const Tensor& t = w.f64(name);
  const std::int64_t cols = t.dim(-1), rows = t.numel() / cols;
  return weight_cache_.emplace(key, quantize_weight(t.data<double>(), rows, cols, in)).first->second;
}

std::vector<Tensor> EmuBackend::run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) {
  const ModelConfig& c = ctx.config;
  const Batch& batch = ctx.batch;
  WeightStore& W = ctx.weights;
  const Numerics num = policy_.resolve(s.name);
  const Fmt st = fmt_of(num.storage), sf = fmt_of(num.stream), mi = fmt_of(num.matmul_input);
  const std::uint64_t seed = stage_hash(s.name, run_seed_);
  const std::int64_t B = batch.rows(), S = batch.seq(), N = B * S;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto weight = [&](std::size_t i) -> const Tensor& { return W.f64(s.weights.at(i)); };
  auto gemm_spec = [&](Fmt out) {
    return GemmSpec{fmt_of(num.matmul_input), fmt_of(num.matmul_accum), out, num.reduction == Reduction::atomic, seed};
  };
  // x [rows, K] in storage -> quantized GEMM operand.
  auto operand = [&](std::vector<float> x, std::int64_t rows, std::int64_t K) {
    quantize_activations(x, rows, K, fmt_of(num.matmul_input));
    return x;
  };

  switch (s.kind) {
    case OpKind::window_mask:
    case OpKind::cmp_mask:
      return exact_.run(s, in, ctx);
    case OpKind::embed: {
      auto out = exact_.run(s, in, ctx);
      for (double& v : out[0].span<double>()) v = arith::round_fmt(static_cast<float>(v), st);
      return out;
    }
    case OpKind::hc_expand: {  // copies of the (already stored) embedding, in the stream format
      auto out = exact_.run(s, in, ctx);
      for (double& v : out[0].span<double>()) v = arith::round_fmt(arith::round_fmt(static_cast<float>(v), st), sf);
      return out;
    }
    case OpKind::rope_table: {
      const auto half = c.rope_dim / 2;
      std::vector<float> cs(static_cast<std::size_t>(N * half)), sn(cs.size());
      rope_tables(rope_frequencies(s.compress_rope ? c.rope_compress : c.rope_main, c.rope_dim),
                  in[0]->data<std::int64_t>(), N, num.rope_angle, cs.data(), sn.data());
      return {store(cs, {B, S, half}), store(sn, {B, S, half})};
    }
    case OpKind::hc_mix: {
      const auto M = c.hc_mix_width(), flat = c.hc_mult * c.hidden_size;
      std::vector<float> mix(static_cast<std::size_t>(N * M));
      hc_mix(load(in[0], sf).data(), N, flat, weight(0).data<double>(), M, eps, num, mix.data());
      return {store(mix, {B, S, M})};
    }
    case OpKind::hc_sinkhorn: {
      const auto n = c.hc_mult;
      std::vector<float> pre(static_cast<std::size_t>(N * n)), post(pre.size()), comb(static_cast<std::size_t>(N * n * n));
      hc_sinkhorn(load_exact(in[0]).data(), N, n, weight(0).data<double>(), weight(1).data<double>(),
                  static_cast<float>(c.hc_eps), c.hc_sinkhorn_iters, num, pre.data(), post.data(), comb.data());
      return {store(pre, {B, S, n}), store(post, {B, S, n}), store(comb, {B, S, n, n})};
    }
    case OpKind::hc_pre: {
      std::vector<float> x(static_cast<std::size_t>(N * c.hidden_size));
      // The collapse is cast to the stream dtype (spec §3.7), not to the activation storage.
      hc_collapse(load(in[0], sf).data(), load_exact(in[1]).data(), N, c.hc_mult, c.hidden_size, sf, x.data());
      return {store(x, {B, S, c.hidden_size})};
    }
    case OpKind::rms_norm:
    case OpKind::head_rms_norm: {
      const Tensor& x = *in[0];
      std::vector<float> y(static_cast<std::size_t>(x.numel()));
      std::vector<float> g = s.kind == OpKind::rms_norm ? to_float(weight(0)) : std::vector<float>{};
      rms_norm(load(in[0], s.stream_input ? sf : st).data(), rows_of(x), x.dim(-1), g.empty() ? nullptr : g.data(), eps,
               fmt_of(num.norm_stats), st, y.data());
      return {store(y, x.shape())};
    }
    case OpKind::linear:
    case OpKind::lm_head: {
      const Tensor& x = *in[0];
      const Tensor& w = weight(0);
      const auto K = x.dim(-1), O = w.dim(0), rows = rows_of(x);
      GemmSpec spec = gemm_spec(st);
      if (s.kind == OpKind::lm_head) {  // the logits knob sets the whole GEMM
        const Fmt lf = fmt_of(num.logits);
        spec.in = lf == Fmt::f16 ? Fmt::f16 : lf == Fmt::bf16 ? Fmt::bf16 : Fmt::f32;  // fp32: an SGEMM
        spec.acc = lf == Fmt::f16 ? Fmt::f16 : Fmt::f32;
        spec.out = lf;
      }
      std::vector<float> xq = load(in[0], st);
      quantize_activations(xq, rows, K, spec.in);
      std::vector<float> y(static_cast<std::size_t>(rows * O));
      gemm(xq.data(), rows, K, gemm_weight(W, s.weights[0], spec.in).data(), O, spec, y.data());
      Shape shape = x.shape();
      shape.back() = O;
      if (s.width > 0) shape.back() = O / s.width, shape.push_back(s.width);
      return {store(y, shape)};
    }
    case OpKind::rope:
    case OpKind::rope_inverse: {
      const Tensor& x = *in[0];
      const std::int64_t rows = rows_of(x), per_token = rows / N;
      std::vector<std::int64_t> row(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) row[static_cast<std::size_t>(r)] = r / per_token;
      std::vector<float> y(static_cast<std::size_t>(x.numel()));
      rope_rotate(load(in[0], st).data(), rows, x.dim(-1), c.rope_dim, load_exact(in[1]).data(), load_exact(in[2]).data(),
                  row.data(), s.kind == OpKind::rope_inverse, st, y.data());
      return {store(y, x.shape())};
    }
    case OpKind::entry_rope: {
      const Tensor& x = *in[0];
      const auto n = x.dim(1), half = c.rope_dim / 2;
      std::vector<std::int64_t> positions(static_cast<std::size_t>(n)), row(static_cast<std::size_t>(B * n));
      for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = w * s.rate;
      for (std::int64_t r = 0; r < B * n; ++r) row[static_cast<std::size_t>(r)] = r % n;
      std::vector<float> cs(static_cast<std::size_t>(n * half)), sn(cs.size()), y(static_cast<std::size_t>(x.numel()));
      rope_tables(rope_frequencies(c.rope_compress, c.rope_dim), positions.data(), n, num.rope_angle, cs.data(), sn.data());
      rope_rotate(load(in[0], st).data(), B * n, x.dim(-1), c.rope_dim, cs.data(), sn.data(), row.data(), false, st, y.data());
      return {store(y, x.shape())};
    }
    case OpKind::cmp_proj: {
      const auto K = c.hidden_size;
      auto x = operand(load(in[0], st), N, K);
      std::vector<Tensor> out;
      for (std::size_t i = 0; i < 2; ++i) {
        const auto O = weight(i).dim(0);
        std::vector<float> y(static_cast<std::size_t>(N * O));
        gemm(x.data(), N, K, gemm_weight(W, s.weights[i], mi).data(), O, gemm_spec(st), y.data());
        out.push_back(store(y, {B, S, O}));
      }
      return out;
    }
    case OpKind::pool: {
      const auto n = S / s.rate, width = s.width, stride = in[0]->dim(-1);
      auto P = load(in[0], st), Z = load(in[1], st);
      std::vector<float> out(static_cast<std::size_t>(B * n * width), 0.0f);
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t off = (b * S + batch.start[static_cast<std::size_t>(b)]) * stride;
        gated_pool(P.data() + off, Z.data() + off, batch.length[static_cast<std::size_t>(b)], weight(0).data<double>(),
                   s.rate, width, s.overlap, num, out.data() + b * n * width);
      }
      return {store(out, {B, n, width})};
    }
    case OpKind::idx_weights: {
      const auto HI = weight(0).dim(0);
      std::vector<float> y(static_cast<std::size_t>(N * HI));
      gemm(operand(load(in[0], st), N, c.hidden_size).data(), N, c.hidden_size, gemm_weight(W, s.weights[0], mi).data(),
           HI, gemm_spec(Fmt::f32), y.data());
      const float scale = 1.0f / std::sqrt(static_cast<float>(HI));
      for (float& v : y) v = arith::round_fmt(v * scale, fmt_of(num.index_score));
      return {store(y, {B, S, HI})};
    }
    case OpKind::idx_score: {
      const auto n = in[1]->dim(1), HI = in[0]->dim(2), dI = in[0]->dim(3);
      const Fmt f = fmt_of(num.index_score);
      auto QI = load(in[0], st), KI = load(in[1], st), w = load(in[2], f);
      std::vector<float> score(static_cast<std::size_t>(B * S * n));
      for (std::int64_t b = 0; b < B; ++b)
        indexer_scores(QI.data() + b * S * HI * dI, KI.data() + b * n * dI, w.data() + b * S * HI,
                       in[3]->data<std::int64_t>() + b * S, S, n, batch.length[static_cast<std::size_t>(b)] / s.rate, HI,
                       dI, s.rate, f, score.data() + b * S * n);
      return {store(score, {B, S, n})};
    }
    case OpKind::idx_topk: {
      const auto n = in[0]->dim(2), k = std::min(c.index_topk, n);
      auto score = load_exact(in[0]);
      const auto* pos = in[1]->data<std::int64_t>();
      Tensor sel(DType::i64, {B, S, k});
      auto* out = sel.data<std::int64_t>();
#pragma omp parallel for schedule(static)
      for (std::int64_t t = 0; t < N; ++t) {
        const std::int64_t b = t / S;
        const std::int64_t causal = std::min(pos[t] + 1 >= 0 ? (pos[t] + 1) / s.rate : 0,
                                             batch.length[static_cast<std::size_t>(b)] / s.rate);
        std::vector<std::int64_t> pick(static_cast<std::size_t>(k));
        topk(score.data() + t * n, n, k, fmt_of(num.topk_compare), num.topk_ties, seed ^ static_cast<std::uint64_t>(t), pick.data());
        std::sort(pick.begin(), pick.end());
        std::int64_t m = 0;
        for (auto w : pick)
          if (w < causal) out[t * k + m++] = w;
        while (m < k) out[t * k + m++] = -1;
      }
      return {sel};
    }
    case OpKind::attention: {
      const auto H = c.num_attention_heads, d = c.head_dim;
      const bool compressed = in.size() > 3;
      const auto n = compressed ? in[3]->dim(1) : 0;
      auto q = load(in[0], st), kv = load(in[1], st);
      std::vector<float> C = compressed ? load(in[3], st) : std::vector<float>{};
      for (auto* v : {&q, &kv, &C})
        for (float& x : *v) x = arith::mfma_operand(x, st);
      auto sinks = to_float(weight(0));
      std::vector<float> o(static_cast<std::size_t>(B * S * H * d));
      for (std::int64_t b = 0; b < B; ++b)
        flash_attention_row(q.data() + b * S * H * d, kv.data() + b * S * d, in[2]->data<std::uint8_t>() + b * S * S,
                            compressed ? C.data() + b * n * d : nullptr,
                            compressed ? in[4]->data<std::uint8_t>() + b * S * n : nullptr, S, n, H, d, sinks.data(), num,
                            o.data() + b * S * H * d);
      return {store(o, {B, S, H, d})};
    }
    case OpKind::grouped_linear: {
      const auto G = c.o_groups, Ro = c.o_lora_rank, per = c.num_attention_heads * c.head_dim / G;
      auto x = load(in[0], st);
      const auto& w = gemm_weight(W, s.weights[0], mi);
      std::vector<float> y(static_cast<std::size_t>(N * G * Ro));
      for (std::int64_t g = 0; g < G; ++g) {
        std::vector<float> xg(static_cast<std::size_t>(N * per)), yg(static_cast<std::size_t>(N * Ro));
        for (std::int64_t t = 0; t < N; ++t)
          std::copy_n(x.data() + t * G * per + g * per, per, xg.data() + t * per);
        xg = operand(std::move(xg), N, per);
        gemm(xg.data(), N, per, w.data() + g * Ro * per, Ro, gemm_spec(st), yg.data());
        for (std::int64_t t = 0; t < N; ++t) std::copy_n(yg.data() + t * Ro, Ro, y.data() + t * G * Ro + g * Ro);
      }
      return {store(y, {B, S, G * Ro})};
    }
    case OpKind::hc_post: {
      std::vector<float> X(static_cast<std::size_t>(in[0]->numel()));
      hc_post(load(in[0], sf).data(), load(in[1], st).data(), load_exact(in[2]).data(), load_exact(in[3]).data(), N,
              c.hc_mult, c.hidden_size, sf, X.data());
      return {store(X, in[0]->shape())};
    }
    case OpKind::router: {
      // fp32: an SGEMM on the stored z (DeepSeek's inference); 16-bit: operands, logits and
      // scores in that format, accumulation as matmul_accum.
      const auto E = weight(0).dim(0);
      const Fmt rf = fmt_of(num.router);
      std::vector<float> z = load(in[0], st);
      quantize_activations(z, N, c.hidden_size, rf);
      const GemmSpec spec{rf, rf == Fmt::f32 ? Fmt::f32 : fmt_of(num.matmul_accum), rf, num.reduction == Reduction::atomic, seed};
      std::vector<float> logit(static_cast<std::size_t>(N * E)), score(logit.size());
      gemm(z.data(), N, c.hidden_size, gemm_weight(W, s.weights[0], rf).data(), E, spec, logit.data());
      for (std::size_t i = 0; i < logit.size(); ++i) {
        const float x = logit[i];
        score[i] = arith::round_fmt(std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x))), rf);
      }
      return {store(logit, {N, E}), store(score, {N, E})};
    }
    case OpKind::moe_select: {
      if (in.size() > 1) return exact_.run(s, in, ctx);  // hash routing: a table lookup
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      const Fmt cmp = fmt_of(num.topk_compare);
      auto score = load_exact(in[0]);
      auto bias = to_float(weight(0));
      Tensor idx(DType::i64, {N, K});
#pragma omp parallel for schedule(static)
      for (std::int64_t t = 0; t < N; ++t) {
        std::vector<float> biased(static_cast<std::size_t>(E));
        for (std::int64_t e = 0; e < E; ++e)
          biased[static_cast<std::size_t>(e)] = arith::add_fmt(score[static_cast<std::size_t>(t * E + e)], bias[static_cast<std::size_t>(e)], cmp);
        topk(biased.data(), E, K, cmp, num.topk_ties, seed ^ static_cast<std::uint64_t>(t), idx.data<std::int64_t>() + t * K);
      }
      return {idx};
    }
    case OpKind::moe_weights: {
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      auto score = load_exact(in[0]);
      const auto* idx = in[1]->data<std::int64_t>();
      std::vector<float> bias;
      if (num.routing_bias_in_weights) {
        const std::string name = fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", s.layer);
        if (W.has(name)) bias = to_float(W.f64(name));
      }
      std::vector<float> wt(static_cast<std::size_t>(N * K));
      for (std::int64_t t = 0; t < N; ++t) {
        float sum = 0;
        auto g = [&](std::int64_t k) {
          const auto e = idx[t * K + k];
          return score[static_cast<std::size_t>(t * E + e)] + (bias.empty() ? 0.0f : bias[static_cast<std::size_t>(e)]);
        };
        for (std::int64_t k = 0; k < K; ++k) sum += g(k);
        const float den = num.routing_norm_eps ? sum + 1e-20f : sum;
        for (std::int64_t k = 0; k < K; ++k)
          wt[static_cast<std::size_t>(t * K + k)] = g(k) / den * static_cast<float>(c.routed_scaling_factor);
      }
      return {store(wt, {N, K})};
    }
    case OpKind::moe_experts:
    case OpKind::moe_shared: {
      const auto D = c.hidden_size, I = c.moe_intermediate_size;
      const bool routed = s.kind == OpKind::moe_experts;
      const auto K = routed ? c.num_experts_per_tok : 1;
      auto z = load(in[0], st);
      const float limit = static_cast<float>(c.swiglu_limit);
      const bool clip = routed || num.shared_clip;
      // FFN over a gathered group of rows: gate/up GEMMs, clipped SwiGLU in float32 stored
      // in the storage format, down GEMM.
      auto ffn = [&](const std::vector<float>& x, std::int64_t rows, const float* wg, const float* wu, const float* wd) {
        auto xq = operand(x, rows, D);
        std::vector<float> g(static_cast<std::size_t>(rows * I)), u(g.size()), y(static_cast<std::size_t>(rows * D));
        gemm(xq.data(), rows, D, wg, I, gemm_spec(Fmt::f32), g.data());
        gemm(xq.data(), rows, D, wu, I, gemm_spec(Fmt::f32), u.data());
        for (std::size_t i = 0; i < g.size(); ++i) {
          float gi = g[i], ui = u[i];
          if (clip) gi = std::min(gi, limit), ui = std::clamp(ui, -limit, limit);
          g[i] = arith::round_fmt(gi / (1.0f + std::exp(-gi)) * ui, st);
        }
        gemm(operand(g, rows, I).data(), rows, I, wd, D, gemm_spec(st), y.data());
        return y;
      };
      std::vector<float> out(static_cast<std::size_t>(N * D));
      if (!routed) {
        out = ffn(z, N, gemm_weight(W, s.weights[0], mi).data(), gemm_weight(W, s.weights[1], mi).data(),
                  gemm_weight(W, s.weights[2], mi).data());
        return {store(out, {N, D})};
      }
      const auto* idx = in[1]->data<std::int64_t>();
      auto wt = load_exact(in[2]);
      const auto& gate_up = gemm_weight(W, s.weights[0], mi);
      const auto& down = gemm_weight(W, s.weights[1], mi);
      std::vector<float> slot_out(static_cast<std::size_t>(N * K * D));
      for (std::int64_t e = 0; e < c.n_routed_experts; ++e) {  // grouped GEMM: tokens gathered per expert
        std::vector<std::int64_t> rows;
        for (std::int64_t r = 0; r < N * K; ++r)
          if (idx[r] == e) rows.push_back(r);
        if (rows.empty()) continue;
        const auto n = static_cast<std::int64_t>(rows.size());
        std::vector<float> x(static_cast<std::size_t>(n * D));
        for (std::int64_t i = 0; i < n; ++i) std::copy_n(z.data() + (rows[static_cast<std::size_t>(i)] / K) * D, D, x.data() + i * D);
        const float* wg = gate_up.data() + e * 2 * I * D;
        auto y = ffn(x, n, wg, wg + I * D, down.data() + e * D * I);
        for (std::int64_t i = 0; i < n; ++i) std::copy_n(y.data() + i * D, D, slot_out.data() + rows[static_cast<std::size_t>(i)] * D);
      }
      const bool atomic = num.reduction == Reduction::atomic;
#pragma omp parallel for schedule(static)
      for (std::int64_t t = 0; t < N; ++t) {
        std::vector<std::int64_t> order(static_cast<std::size_t>(K));
        for (std::int64_t k = 0; k < K; ++k) order[static_cast<std::size_t>(k)] = k;
        if (atomic) {  // experts finish in a run-dependent order and atomically add into the token's stored row
          std::uint64_t h = arith::mix64(seed ^ static_cast<std::uint64_t>(t));
          for (std::int64_t i = K - 1; i > 0; --i) {
            std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(h % static_cast<std::uint64_t>(i + 1))]);
            h = arith::mix64(h);
          }
        }
        for (std::int64_t ch = 0; ch < D; ++ch) {
          float acc = 0;
          for (auto k : order) {
            const float c_k = wt[static_cast<std::size_t>(t * K + k)] * slot_out[static_cast<std::size_t>((t * K + k) * D + ch)];
            // atomic: each contribution lands in the stored output with its own rounding
            acc = atomic ? arith::add_fmt(acc, arith::round_fmt(c_k, st), st) : acc + c_k;
          }
          out[static_cast<std::size_t>(t * D + ch)] = arith::round_fmt(acc, st);
        }
      }
      return {store(out, {N, D})};
    }
    case OpKind::add: {
      auto a = load(in[0], st), b = load(in[1], st);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = arith::round_fmt(a[i] + b[i], st);
      return {store(a, in[2]->shape())};
    }
    case OpKind::hc_head: {
      const auto n = c.hc_mult, D = c.hidden_size;
      auto X = load(in[0], sf);
      std::vector<float> preh(static_cast<std::size_t>(N * n)), y(static_cast<std::size_t>(N * D));
      hc_head_weights(X.data(), N, n, D, weight(0).data<double>(), weight(1).data<double>(), weight(2).data<double>(), eps,
                      static_cast<float>(c.hc_eps), num, preh.data());
      hc_collapse(X.data(), preh.data(), N, n, D, sf, y.data());
      return {store(y, {B, S, D}), store(preh, {B, S, n})};
    }
  }
  throw std::logic_error(fmt::format("emu: no implementation for stage {} ({})", s.name, op_kind_name(s.kind)));
}

}  // namespace tdiff::emu
