#include "checks/model_stats.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "casefile/case_file.h"
#include "base/error.h"
#include "casefile/h5io.h"
#include "refcpu/attention.h"

namespace tdiff {

Quantiles quantiles(std::vector<double>& v) {
  Quantiles q;
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) {
    const double x = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(x);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (x - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  q.p10 = at(0.1), q.p50 = at(0.5), q.p90 = at(0.9);
  return q;
}

namespace {

const Stage& stage_named(const CaseSession& s, const std::string& name) {
  for (const auto& st : s.stages)
    if (st.name == name) return st;
  throw std::logic_error("model_stats: no stage " + name);
}

// A stored reference tensor, or an InputError that says which one is missing and how to store it.
Tensor stored(const CaseSession& s, const TensorRef& ref) {
  if (!s.reference().has(ref.stage, ref.tensor))
    input_error("{}: /reference lacks {} (tdiff stats needs every layer's attn.core inputs, hc_ffn.post and "
                "moe.router; run: tdiff golden {})",
                s.path, ref.key(), s.path);
  return s.reference().get(ref.stage, ref.tensor);
}

const std::uint8_t* bytes(const Tensor& t) { return reinterpret_cast<const std::uint8_t*>(t.raw()); }

// Per (real query token, head) of one layer, tokens in row order: filled in parallel, reduced in
// a fixed order, so the statistics do not depend on the thread count.
struct AttnValues {
  std::vector<double> entropy, sink, first;  // [T, H]
  std::vector<double> max_logit;             // [T]
  std::vector<char> seen;                    // [T]: the token sees a key
};

// Entropy (nats) of one head's distribution: probabilities p[0..nk) and the sink's share.
double entropy_of(const double* p, std::int64_t nk, double sink) {
  double e = sink > 0 ? -sink * std::log(sink) : 0.0;
  for (std::int64_t k = 0; k < nk; ++k)
    if (p[k] > 0) e -= p[k] * std::log(p[k]);
  return e;
}

// The inputs of one attn.core stage as the reference stored them.
struct CoreInputs {
  Tensor q, kv, win, C, cmask;
  std::int64_t n = 0;  // compressed entries per row
  const double* sinks = nullptr;
};

CoreInputs core_inputs(CaseSession& s, const Stage& core) {
  CoreInputs in;
  in.q = stored(s, core.inputs[0]), in.kv = stored(s, core.inputs[1]), in.win = stored(s, core.inputs[2]);
  if (core.inputs.size() > 3) {
    in.C = stored(s, core.inputs[3]), in.cmask = stored(s, core.inputs[4]);
    in.n = in.C.dim(1);
  }
  in.sinks = s.weights->f64(core.weights.at(0)).data<double>();
  return in;
}

// Query token i of row b, stored at slot t of `v`.
void token_values(const CoreInputs& in, const Batch& batch, std::int64_t H, std::int64_t d, std::int64_t b, std::int64_t i,
                  std::size_t t, AttnValues& v) {
  const std::int64_t S = batch.seq(), n = in.n;
  std::vector<double> keys, logits, probs, sink_p(static_cast<std::size_t>(H));
  const std::uint8_t* wb = bytes(in.win) + b * S * S;
  const std::int64_t nk = refcpu::gather_keys(i, in.kv.data<double>() + b * S * d, wb, n ? in.C.data<double>() + b * n * d : nullptr,
                                              n ? bytes(in.cmask) + b * S * n : nullptr, S, n, d, keys);
  if (nk == 0) return;
  logits.resize(static_cast<std::size_t>(H * nk));
  probs.resize(static_cast<std::size_t>(H * nk));
  refcpu::attention_probs(in.q.data<double>() + (b * S + i) * H * d, keys.data(), nk, H, d, in.sinks, logits.data(), probs.data(),
                          sink_p.data());
  double mx = 0;
  for (double l : logits) mx = std::max(mx, std::abs(l));
  v.max_logit[t] = mx;
  v.seen[t] = 1;
  const bool sees_first = wb[i * S + batch.start[static_cast<std::size_t>(b)]] != 0;  // then it is key 0
  for (std::int64_t h = 0; h < H; ++h) {
    const double* p = probs.data() + h * nk;
    const std::size_t at = t * static_cast<std::size_t>(H) + static_cast<std::size_t>(h);
    v.entropy[at] = entropy_of(p, nk, sink_p[static_cast<std::size_t>(h)]);
    v.sink[at] = sink_p[static_cast<std::size_t>(h)];
    v.first[at] = sees_first ? p[0] : 0.0;
  }
}

AttnValues attention_values(CaseSession& s, const Stage& core) {
  const Batch& batch = s.info.batch;
  const std::int64_t H = s.info.config.num_attention_heads, d = s.info.config.head_dim;
  const CoreInputs in = core_inputs(s, core);
  std::vector<std::pair<std::int64_t, std::int64_t>> tokens;  // (row, index) of every real token
  for (std::int64_t b = 0; b < batch.rows(); ++b)
    for (std::int64_t k = 0; k < batch.length[static_cast<std::size_t>(b)]; ++k)
      tokens.emplace_back(b, batch.start[static_cast<std::size_t>(b)] + k);
  AttnValues v;
  const std::size_t T = tokens.size(), TH = T * static_cast<std::size_t>(H);
  v.entropy.assign(TH, 0.0), v.sink.assign(TH, 0.0), v.first.assign(TH, 0.0);
  v.max_logit.assign(T, 0.0), v.seen.assign(T, 0);
#pragma omp parallel for schedule(dynamic, 4)
  for (std::size_t t = 0; t < T; ++t) token_values(in, batch, H, d, tokens[t].first, tokens[t].second, t, v);
  return v;
}

void fill_attention(CaseSession& s, const std::string& prefix, LayerStats& ls) {
  const AttnValues v = attention_values(s, stage_named(s, prefix + "attn.core"));
  const std::size_t T = v.seen.size(), H = static_cast<std::size_t>(s.info.config.num_attention_heads);
  std::vector<double> entropy, head_sink(H, 0.0);
  double sink_sum = 0, first_sum = 0;
  std::size_t seen = 0;
  for (std::size_t t = 0; t < T; ++t) {
    if (!v.seen[t]) continue;
    ++seen;
    ls.max_logit = std::max(ls.max_logit, v.max_logit[t]);
    for (std::size_t h = 0; h < H; ++h) {
      entropy.push_back(v.entropy[t * H + h]);
      sink_sum += v.sink[t * H + h], first_sum += v.first[t * H + h], head_sink[h] += v.sink[t * H + h];
    }
  }
  ls.entropy = quantiles(entropy);
  const double count = static_cast<double>(std::max<std::size_t>(seen * H, 1));
  ls.sink_mass = sink_sum / count;
  ls.first_mass = first_sum / count;
  std::size_t sink_heads = 0;
  for (double hs : head_sink) sink_heads += seen > 0 && hs >= 0.5 * static_cast<double>(seen);
  ls.sink_heads = static_cast<double>(sink_heads) / static_cast<double>(std::max<std::size_t>(H, 1));
}

// |X| over the real tokens of the layer's output streams.
void fill_activations(CaseSession& s, const std::string& prefix, LayerStats& ls) {
  const Tensor X = stored(s, {prefix + "hc_ffn.post", "X"});
  const Batch& batch = s.info.batch;
  const std::int64_t S = batch.seq(), per_token = X.numel() / (batch.rows() * S);
  std::vector<double> a;
  for (std::int64_t b = 0; b < batch.rows(); ++b) {
    const std::int64_t first = batch.start[static_cast<std::size_t>(b)];
    const double* x = X.data<double>() + (b * S + first) * per_token;
    for (std::int64_t j = 0; j < batch.length[static_cast<std::size_t>(b)] * per_token; ++j) a.push_back(std::abs(x[j]));
  }
  if (a.empty()) return;
  ls.act_max = *std::max_element(a.begin(), a.end());
  auto mid = a.begin() + static_cast<std::ptrdiff_t>(a.size() / 2);
  std::nth_element(a.begin(), mid, a.end());
  ls.act_median = *mid;
  ls.act_ratio = ls.act_median > 0 ? ls.act_max / ls.act_median : std::numeric_limits<double>::infinity();
}

// The gap between the K-th and (K+1)-th biased score of every real token, on top-k layers.
void fill_router(CaseSession& s, const std::string& prefix, LayerStats& ls) {
  const Stage& select = stage_named(s, prefix + "moe.select");
  if (select.weights.empty() || select.weights[0].ends_with("tid2eid")) return;  // a hash layer
  const Tensor score = stored(s, {prefix + "moe.router", "score"});
  const double* bias = s.weights->f64(select.weights[0]).data<double>();
  const Batch& batch = s.info.batch;
  const std::int64_t E = score.dim(-1), K = s.info.config.num_experts_per_tok, S = batch.seq();
  if (K >= E) return;
  std::vector<double> margins, v(static_cast<std::size_t>(E));
  for (std::int64_t b = 0; b < batch.rows(); ++b) {
    const std::int64_t first = batch.start[static_cast<std::size_t>(b)];
    for (std::int64_t i = first; i < first + batch.length[static_cast<std::size_t>(b)]; ++i) {
      const double* sc = score.data<double>() + (b * S + i) * E;
      for (std::int64_t e = 0; e < E; ++e) v[static_cast<std::size_t>(e)] = sc[e] + bias[e];
      std::partial_sort(v.begin(), v.begin() + K + 1, v.end(), std::greater<>());
      margins.push_back(v[static_cast<std::size_t>(K - 1)] - v[static_cast<std::size_t>(K)]);
    }
  }
  ls.routed = true;
  ls.margin = quantiles(margins);
}

}  // namespace

ModelStats compute_model_stats(CaseSession& s) {
  ModelStats m;
  m.case_path = s.path;
  for (std::int64_t len : s.info.batch.length) m.tokens += len;
  for (std::int64_t l = 0; l < s.info.config.num_hidden_layers; ++l) {
    LayerStats ls;
    ls.layer = static_cast<int>(l);
    ls.type = layer_type_name(s.info.config.layer_types[static_cast<std::size_t>(l)]);
    const std::string prefix = fmt::format("L{:02d}.", l);
    fill_attention(s, prefix, ls);
    fill_activations(s, prefix, ls);
    fill_router(s, prefix, ls);
    m.layers.push_back(std::move(ls));
    s.weights->trim();
  }
  return m;
}

}  // namespace tdiff
