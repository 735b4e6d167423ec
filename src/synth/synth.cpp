#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"
#include "formats/safetensors.h"
#include "synth/synth_profile.h"

namespace tdiff {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string>& synth_preset_names() {
  static const std::vector<std::string> names{"tiny", "small", "v4-flash-dims", "v4-flash-narrow"};
  return names;
}

ModelConfig synth_preset(const std::string& name) {
  ModelConfig c;  // the defaults are V4-Flash's dimensions
  using L = LayerType;
  using M = MlpType;
  if (name == "tiny") {  // model-spec §9, exactly
    c.vocab_size = 256, c.hidden_size = 64, c.num_hidden_layers = 4, c.num_attention_heads = 4;
    c.head_dim = 32, c.rope_dim = 8, c.q_lora_rank = 32, c.o_groups = 2, c.o_lora_rank = 16;
    c.n_routed_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32;
    c.index_n_heads = 4, c.index_head_dim = 16, c.index_topk = 4, c.sliding_window = 8;
    c.csa_rate = 4, c.hca_rate = 8, c.hc_mult = 4, c.hc_sinkhorn_iters = 20;
    c.layer_types = {L::sliding, L::csa, L::hca, L::csa};
    c.mlp_types = {M::hash_moe, M::moe, M::moe, M::moe};
  } else if (name == "small") {  // every layer kind twice, more heads, and YaRN on the compress table
    c.vocab_size = 1024, c.hidden_size = 256, c.num_hidden_layers = 6, c.num_attention_heads = 8;
    c.head_dim = 64, c.rope_dim = 16, c.q_lora_rank = 128, c.o_groups = 4, c.o_lora_rank = 64;
    c.n_routed_experts = 16, c.num_experts_per_tok = 4, c.moe_intermediate_size = 128;
    c.index_n_heads = 8, c.index_head_dim = 32, c.index_topk = 8, c.sliding_window = 32;
    c.csa_rate = 4, c.hca_rate = 16, c.hc_mult = 4, c.hc_sinkhorn_iters = 20;
    c.layer_types = {L::sliding, L::sliding, L::csa, L::hca, L::csa, L::hca};
    c.mlp_types = {M::hash_moe, M::hash_moe, M::hash_moe, M::moe, M::moe, M::moe};
    // With r = 16 and L0 = 256 the YaRN ramp runs over frequencies 0..3 (lo = 0, hi = 3), so
    // short test prompts already see blended frequencies.
    c.rope_compress = RopeTable{160000.0, true, 16.0, 256.0, 32.0, 1.0};
    c.max_position_embeddings = 4096;  // = factor * original, as transformers expects (else it warns)
  } else if (name == "v4-flash-dims" || name == "v4-flash-narrow") {  // model-spec §1: 2 sliding, then CSA (even) / HCA (odd)
    // narrow: the whole 43-layer schedule at real attention widths, the vocabulary and the
    // hyper-connections as released, with 16 experts of width 256 (top 6), so that the model
    // (about 0.5 GB a layer as bf16) and a 4096-token reference of its layer boundaries fit
    // one machine's disk.
    if (name == "v4-flash-narrow") c.n_routed_experts = 16, c.moe_intermediate_size = 256;
    c.layer_types.clear();
    c.mlp_types.clear();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
      c.layer_types.push_back(i < 2 ? L::sliding : i % 2 == 0 ? L::csa : L::hca);
      c.mlp_types.push_back(i < 3 ? M::hash_moe : M::moe);
    }
    c.rope_compress = RopeTable{160000.0, true, 16.0, 65536.0, 32.0, 1.0};
  } else {
    input_error("unknown preset '{}' (known: {})", name, fmt::join(synth_preset_names(), ", "));
  }
  c.validate("preset " + name);
  return c;
}

namespace {

// ---- Portable random numbers ---------------------------------------------------------------

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// One stream per tensor, seeded from the model seed and the tensor name, so a tensor's values
// do not depend on which other tensors the config has (truncating layers keeps the rest).
class Rng {
 public:
  Rng(std::uint64_t seed, const std::string& name) : gen_(splitmix64(splitmix64(seed) ^ fnv1a64(name))) {}

  // Standard normal approximated by the Irwin-Hall sum of 12 uniforms (mean 0, variance 1,
  // tails cut at +-6). Integer arithmetic only: std::normal_distribution and libm's log/cos
  // differ between platforms; this does not.
  double normal() {
    std::uint64_t s = 0;
    for (int i = 0; i < 6; ++i) {
      const std::uint64_t x = gen_();
      s += (x >> 32) + (x & 0xFFFFFFFFull);
    }
    const auto centred = static_cast<std::int64_t>(s) - 6 * static_cast<std::int64_t>(0xFFFFFFFFull);
    return static_cast<double>(centred) * 0x1p-32;  // exact: |centred| < 2^35, a power-of-two scale
  }

  // Uniform integer in [0, n), unbiased (rejection).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
    for (;;) {
      const std::uint64_t x = gen_();
      if (x < limit) return x % n;
    }
  }

 private:
  std::mt19937_64 gen_;
};

// A standard deviation rounded to 16 significant bits, so that std * z (z has at most 35
// significant bits) is exact in double: the result is then the same with or without FMA
// contraction of mean + std * z.
double portable_std(double s) {
  int e;
  const double m = std::frexp(s, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 16)), e - 16);
}

// ---- What each parameter is drawn from ----------------------------------------------------
//
// Default: N(0, initializer_range) as HF initialises linears. That is kept where a norm
// follows the product, so the scale cancels (q_a, q_b, kv, compressor and indexer kv, and the
// hc fn whose input is RMS-normalised): there the attention logits already have O(1) spread,
// because q (per-head RMSNorm) and kv (kv_norm) both have unit RMS per channel, making
// q.k/sqrt(d) ~ N(0, 1) whatever the projections' scale. No q/kv factor is needed.
// Elsewhere a fresh HF model would be degenerate (near-uniform pooling and routing, logits
// ~0.1, zero sinks and biases, unit norms), so:
//   - embeddings N(0, 1), and every product read without a norm after it scaled by fan-in,
//     N(0, g / sqrt(in)): activations stay O(1) and each sub-layer adds O(1) to the streams;
//   - compressor/indexer gate_proj, router gate, indexer q_b and weights_proj: g = 1, so gate
//     logits, router logits (std ~1, sqrt-softplus scores spread ~0.3) and indexer scores are
//     O(1): pooling and routing are far from uniform, and all experts get used;
//   - o_a, o_b, expert and shared gate/up/down: g = 1 (SwiGLU pre-activations ~N(0, 1));
//   - lm_head: g = 2, logits std ~2, so the next-token distribution is peaked enough for
//     top-1 and KL checks to mean something;
//   - parameters HF starts at 1 (RMSNorm weights, hc scale): 1 + N(0, 0.1), at least 0.5;
//   - parameters HF starts at 0: hc base N(0, 0.1), compressor/indexer position_bias
//     N(0, 0.1), attention sinks N(0, 0.5), e_score_correction_bias N(0, 0.05) (small next to
//     the score spread, yet it flips some selections, so a bias bug shows);
//   - tid2eid: K distinct experts per token, uniformly at random.
// Checked with transformers 5.17 (float64) on tiny and small, seed 1, 2 x 64 random tokens:
// loads with no missing or unexpected keys; logits std ~2, mean top-1 probability 0.12-0.18;
// attention entropy ~80% of uniform (mean max probability 0.2-0.3); router logits std ~1 and
// every expert chosen in every layer; stream RMS grows from ~1.4 to ~2.4 over the layers.
struct Init {
  enum Kind { normal, tid2eid } kind = normal;
  double mean = 0.0;
  double std = 0.0;
  double floor = -INFINITY;  // values below are raised to it (keeps norm weights positive)
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Init init_for(const ModelConfig& c, const std::string& name, const WeightSpec& spec) {
  const double ir = c.initializer_range;
  const double fan_in = spec.shape.empty() ? 1.0 : static_cast<double>(spec.shape.back());
  auto fan = [&](double gain) { return Init{Init::normal, 0.0, gain / std::sqrt(fan_in)}; };
  const Init around_one{Init::normal, 1.0, 0.1, 0.5};
  if (spec.integer) return Init{Init::tid2eid};
  if (name == "model.embed_tokens.weight") return Init{Init::normal, 0.0, 1.0};
  if (name == "lm_head.weight") return fan(2.0);
  if (ends_with(name, "norm.weight")) return around_one;  // every RMSNorm weight
  if (ends_with(name, "hc_scale") || ends_with(name, "_hc.scale")) return around_one;
  if (ends_with(name, "hc_base") || ends_with(name, "_hc.base")) return Init{Init::normal, 0.0, 0.1};
  if (ends_with(name, "hc_fn") || ends_with(name, "_hc.fn")) return Init{Init::normal, 0.0, ir};
  if (ends_with(name, "self_attn.sinks")) return Init{Init::normal, 0.0, 0.5};
  if (ends_with(name, "position_bias")) return Init{Init::normal, 0.0, 0.1};
  if (ends_with(name, "gate.e_score_correction_bias")) return Init{Init::normal, 0.0, 0.05};
  if (ends_with(name, "mlp.gate.weight")) return fan(1.0);
  if (contains(name, "compressor.") && ends_with(name, "gate_proj.weight")) return fan(1.0);
  if (ends_with(name, "indexer.q_b_proj.weight") || ends_with(name, "weights_proj.weight")) return fan(1.0);
  if (ends_with(name, "o_a_proj.weight") || ends_with(name, "o_b_proj.weight")) return fan(1.0);
  if (contains(name, "mlp.experts.") || contains(name, "mlp.shared_experts.")) return fan(1.0);
  if (ends_with(name, "q_a_proj.weight") || ends_with(name, "q_b_proj.weight") || ends_with(name, "kv_proj.weight"))
    return Init{Init::normal, 0.0, ir};
  throw std::logic_error("synth: no initialisation rule for weight " + name);
}

// The draw of `name` under `profile`: the trained profile's where it has its own (synth_profile.h).
Init draw_for(const ModelConfig& c, const std::string& name, const WeightSpec& spec, SynthProfile profile) {
  if (profile == SynthProfile::trained && !spec.integer)
    if (const auto d = trained_draw(c, name, spec.shape)) return Init{Init::normal, d->mean, d->std, d->floor};
  return init_for(c, name, spec);
}

// Float tensors above kBlock elements are drawn in independent blocks of kBlock elements, block b
// from its own stream (seed, "name#b"), so the tens of GB of a V4-Flash-sized model are generated
// on every core at once; smaller tensors (all of tiny and small) are one stream, as they always were.
constexpr std::int64_t kBlock = kSynthBlock;

// Produces a tensor's values in order, in chunks of any size (the same values whatever the
// chunking, so streaming to disk and synth_weight agree); blocked tensors block by block.
class WeightGen {
 public:
  WeightGen(const ModelConfig& c, const std::string& name, const WeightSpec& spec, std::uint64_t seed,
            const SynthOptions& opt)
      : init_(draw_for(c, name, spec, opt.profile)), rng_(seed, name), experts_(c.n_routed_experts),
        row_(spec.shape.empty() ? 1 : spec.shape.back()), std_(portable_std(init_.std)),
        blocked_(init_.kind == Init::normal && shape_numel(spec.shape) > kBlock), seed_(seed), name_(name),
        dtype_(synth_storage(name, spec, opt.dtype)) {
    if (init_.kind == Init::tid2eid && row_ > experts_)
      throw std::logic_error("synth: tid2eid row wider than the expert count");
    if (name == "model.embed_tokens.weight") outliers_ = synth_embedding_outliers(c, seed, opt);
    if (opt.profile == SynthProfile::trained) scale_ = trained_scale(c, name, seed);
  }
  DType dtype() const { return dtype_; }
  // Elements per indivisible group (a tid2eid row).
  std::int64_t group() const { return init_.kind == Init::tid2eid ? row_ : 1; }

  // Block b (elements [b kBlock, b kBlock + n)) of a blocked tensor; independent of every other
  // block, so blocks may be generated concurrently (const: no shared state).
  void fill_block(std::int64_t b, std::byte* out, std::int64_t n) const {
    Rng rng(seed_, fmt::format("{}#{}", name_, b));
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<float>(std::max(init_.floor, init_.mean + std_ * rng.normal()));
    apply_scale(v, b * kBlock);
    place_outliers(v, b * kBlock);
    store(v, out);
  }

  void fill(std::byte* out, std::int64_t n) {
    if (init_.kind == Init::tid2eid) {
      std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
      std::vector<std::int64_t> perm(static_cast<std::size_t>(experts_));
      for (std::int64_t r = 0; r < n / row_; ++r) {
        // Partial Fisher-Yates: the first K of a random permutation are K distinct experts.
        for (std::int64_t e = 0; e < experts_; ++e) perm[static_cast<std::size_t>(e)] = e;
        for (std::int64_t k = 0; k < row_; ++k) {
          const auto j = k + static_cast<std::int64_t>(rng_.below(static_cast<std::uint64_t>(experts_ - k)));
          std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(j)]);
          ids[static_cast<std::size_t>(r * row_ + k)] = perm[static_cast<std::size_t>(k)];
        }
      }
      std::memcpy(out, ids.data(), static_cast<std::size_t>(n) * 8);
      return;
    }
    if (blocked_) {  // from a block boundary on (synth_weight asks for the whole tensor)
      const auto es = static_cast<std::int64_t>(dtype_size(dtype_));
      for (std::int64_t done = 0; done < n; done += kBlock, pos_ += kBlock)
        fill_block(pos_ / kBlock, out + done * es, std::min(kBlock, n - done));
      return;
    }
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<float>(std::max(init_.floor, init_.mean + std_ * rng_.normal()));
    apply_scale(v, pos_);
    place_outliers(v, pos_);
    store(v, out);
    pos_ += n;
  }

 private:
  // The values in the storage dtype: float32 as drawn, or their bf16 bit patterns.
  void store(const std::vector<float>& v, std::byte* out) const {
    if (dtype_ == DType::f32) {
      std::memcpy(out, v.data(), v.size() * 4);
      return;
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint32_t u;
      const float r = round_to_bf16(v[i]);
      std::memcpy(&u, &r, 4);
      const auto hi = static_cast<std::uint16_t>(u >> 16);
      std::memcpy(out + 2 * i, &hi, 2);
    }
  }

  // The trained profile's per-element gains (element `pos + i` of the tensor, row-major), on the
  // drawn value rounded to float32 as the default profile stores it, so both profiles share
  // their random draws.
  void apply_scale(std::vector<float>& v, std::int64_t pos) const {
    if (!scale_) return;
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(static_cast<double>(v[i]) * scale_(pos + static_cast<std::int64_t>(i)));
  }

  // Embedding rows of the outlier token ids: the outlier channels take their massive values
  // (the random draws stay consumed, so every other value is as without --outliers).
  void place_outliers(std::vector<float>& v, std::int64_t pos) const {
    for (std::size_t i = 0; i < outliers_.token_ids.size(); ++i)
      for (std::size_t k = 0; k < outliers_.channels.size(); ++k) {
        const std::int64_t at = outliers_.token_ids[i] * row_ + outliers_.channels[k] - pos;
        if (at < 0 || at >= static_cast<std::int64_t>(v.size())) continue;
        // +-10% per token id, from the id and channel alone (chunking never changes it).
        const std::uint64_t h = splitmix64(static_cast<std::uint64_t>(outliers_.token_ids[i] * 131 + outliers_.channels[k]));
        const double spread = 0.9 + 0.2 * std::ldexp(static_cast<double>(h >> 11), -53);
        v[static_cast<std::size_t>(at)] = round_to_bf16(outliers_.magnitude[k] * spread);
      }
  }
  static float round_to_bf16(double x) {
    std::uint32_t u;
    const float f = static_cast<float>(x);
    std::memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  }

  Init init_;
  Rng rng_;
  std::int64_t experts_;
  std::int64_t row_;
  double std_;
  bool blocked_;
  std::uint64_t seed_;
  std::string name_;
  DType dtype_;
  SynthOutliers outliers_;  // empty unless --outliers or the trained profile, and this is the embedding
  std::function<double(std::int64_t)> scale_;  // trained profile: gain of element i; empty otherwise
  std::int64_t pos_ = 0;    // elements produced so far
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) input_error("{}: cannot write", p.string());
}

// model.safetensors written tensor by tensor, each generated in chunks: a V4-Flash-sized layer
// holds tens of GB of float32 experts, more than fits in memory at once. The layout is the
// one write_safetensors produces (name order, space-padded 8-byte-aligned header).
void write_model_file(const ModelConfig& c, std::uint64_t seed, const fs::path& path, const SynthProgress& progress,
                      const SynthOptions& opt) {
  const auto specs = expected_weights(c);
  std::vector<SafetensorsStream::Entry> entries;
  std::uint64_t total_bytes = 0;
  for (const auto& [name, spec] : specs) {
    const DType dt = synth_storage(name, spec, opt.dtype);
    const std::uint64_t bytes = static_cast<std::uint64_t>(shape_numel(spec.shape)) * dtype_size(dt);
    entries.push_back({name, dt == DType::i64 ? "I64" : dt == DType::bf16 ? "BF16" : "F32", spec.shape, bytes});
    total_bytes += bytes;
  }
  // transformers refuses safetensors files whose metadata lacks format=pt.
  SafetensorsStream out(path.string(), std::move(entries), {{"format", "pt"}, {"tdiff_synth_seed", std::to_string(seed)}});
  // Work items: a whole unblocked tensor (one stream, written in chunks) or one block of a
  // blocked tensor; items run on all threads, each writing at its own offset.
  struct Item {
    std::size_t spec;
    std::int64_t block;  // -1: the whole (unblocked) tensor
    std::uint64_t offset;
  };
  std::vector<std::pair<std::string, WeightSpec>> list(specs.begin(), specs.end());
  std::vector<Item> items;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& spec = list[i].second;
    const std::int64_t total = shape_numel(spec.shape);
    const std::size_t es = dtype_size(synth_storage(list[i].first, spec, opt.dtype));
    const std::uint64_t at_byte = out.data_offset(i);  // entries and specs are both in name order
    if (!spec.integer && total > kBlock)
      for (std::int64_t b = 0; b * kBlock < total; ++b)
        items.push_back({i, b, at_byte + static_cast<std::uint64_t>(b * kBlock) * es});
    else
      items.push_back({i, -1, at_byte});
  }
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // elements per chunk of an unblocked tensor
  std::uint64_t done = 0;
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t w = 0; w < items.size(); ++w) {
    try {
      const Item& item = items[w];
      const auto& [name, spec] = list[item.spec];
      WeightGen gen(c, name, spec, seed, opt);
      const std::int64_t total = shape_numel(spec.shape);
      const std::size_t es = dtype_size(gen.dtype());
      std::vector<std::byte> buf;
      auto wrote = [&](std::size_t bytes) {
#pragma omp critical(tdiff_synth_progress)
        {
          done += bytes;
          if (progress) progress(done, total_bytes);
        }
      };
      if (item.block >= 0) {
        const std::int64_t n = std::min(kBlock, total - item.block * kBlock);
        buf.resize(static_cast<std::size_t>(n) * es);
        gen.fill_block(item.block, buf.data(), n);
        out.write(item.offset, buf.data(), buf.size());
        wrote(buf.size());
        continue;
      }
      const std::int64_t step = std::max(kChunk / gen.group(), std::int64_t{1}) * gen.group();
      for (std::int64_t at = 0; at < total; at += step) {
        const std::int64_t n = std::min(step, total - at);
        buf.resize(static_cast<std::size_t>(n) * es);
        gen.fill(buf.data(), n);
        out.write(item.offset + static_cast<std::uint64_t>(at) * es, buf.data(), buf.size());
        wrote(buf.size());
      }
    } catch (...) {
#pragma omp critical(tdiff_synth_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  out.close();
}

bool is_model_file(const std::string& f) {
  return f == "config.json" || f == "generation_config.json" || f == "model.safetensors.index.json" ||
         ends_with(f, ".safetensors");
}

}  // namespace

namespace {

// `ids` token ids and `channels` channels from the stream `stream`, magnitudes in [lo, hi) with a
// random sign per channel; ids below `first_id` are never taken (1 keeps the padding id 0 free).
SynthOutliers pick_outliers(std::uint64_t seed, const char* stream, std::int64_t ids, std::int64_t range_ids,
                            std::int64_t channels, std::int64_t range_channels, double lo, double hi,
                            std::int64_t first_id = 0) {
  SynthOutliers o;
  Rng rng(seed, stream);
  auto pick = [&](std::int64_t count, std::int64_t range) {  // distinct, ascending
    std::vector<std::int64_t> all(static_cast<std::size_t>(range));
    for (std::int64_t i = 0; i < range; ++i) all[static_cast<std::size_t>(i)] = i;
    for (std::int64_t k = 0; k < count; ++k)
      std::swap(all[static_cast<std::size_t>(k)],
                all[static_cast<std::size_t>(k + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(range - k))))]);
    std::vector<std::int64_t> v(all.begin(), all.begin() + count);
    std::sort(v.begin(), v.end());
    return v;
  };
  o.token_ids = pick(ids, range_ids - first_id);
  for (auto& id : o.token_ids) id += first_id;
  o.channels = pick(channels, range_channels);
  for (std::size_t k = 0; k < o.channels.size(); ++k) {
    const double m = lo + (hi - lo) * static_cast<double>(rng.below(1u << 20)) / static_cast<double>(1u << 20);
    o.magnitude.push_back(rng.below(2) ? m : -m);
  }
  return o;
}

}  // namespace

SynthOutliers synth_outliers(const ModelConfig& c, std::uint64_t seed) {
  return pick_outliers(seed, "tdiff.outliers", std::max<std::int64_t>(2, c.vocab_size / 128), c.vocab_size,
                       std::clamp<std::int64_t>(c.hidden_size / 16, 1, 4), c.hidden_size, 100.0, 1000.0);
}

SynthOutliers synth_massive(const ModelConfig& c, std::uint64_t seed) {
  return pick_outliers(seed, "tdiff.trained.massive", std::max<std::int64_t>(2, c.vocab_size / 16), c.vocab_size,
                       std::clamp<std::int64_t>(c.hidden_size / 16, 1, 2), c.hidden_size, kTrainedMassiveLo,
                       kTrainedMassiveHi, 1);
}

SynthOutliers synth_embedding_outliers(const ModelConfig& c, std::uint64_t seed, const SynthOptions& opt) {
  if (opt.profile == SynthProfile::trained) return synth_massive(c, seed);
  return opt.outliers ? synth_outliers(c, seed) : SynthOutliers{};
}

std::uint64_t synth_hash(std::uint64_t seed, const std::string& name) { return splitmix64(splitmix64(seed) ^ fnv1a64(name)); }

DType synth_storage(const std::string& name, const WeightSpec& spec, DType dtype) {
  if (spec.integer) return DType::i64;
  if (dtype != DType::bf16) return DType::f32;
  const bool release_16bit = name.ends_with(".weight") || name.ends_with("experts.gate_up_proj") ||
                             name.ends_with("experts.down_proj");
  return release_16bit ? DType::bf16 : DType::f32;
}

Tensor synth_weight(const ModelConfig& c, const std::string& name, const WeightSpec& spec, std::uint64_t seed,
                    const SynthOptions& opt) {
  WeightGen gen(c, name, spec, seed, opt);
  Tensor t(gen.dtype(), spec.shape);
  gen.fill(t.raw(), t.numel());
  return t;
}

std::vector<float> synth_values(const ModelConfig& c, const std::string& name, const WeightSpec& spec,
                                std::uint64_t seed, const SynthOptions& opt, std::int64_t begin, std::int64_t count) {
  SynthOptions f32 = opt;
  f32.dtype = DType::f32;
  WeightGen gen(c, name, spec, seed, f32);
  const std::int64_t total = shape_numel(spec.shape);
  if (spec.integer || begin < 0 || count < 0 || begin + count > total)
    throw std::logic_error(fmt::format("synth_values: bad range [{}, {}) of {}", begin, begin + count, name));
  std::vector<float> out(static_cast<std::size_t>(count));
  if (total > kBlock) {  // only the blocks that hold the range
    std::vector<float> block;
    for (std::int64_t b = begin / kBlock; b * kBlock < begin + count; ++b) {
      const std::int64_t b0 = b * kBlock, n = std::min(kBlock, total - b0);
      block.resize(static_cast<std::size_t>(n));
      gen.fill_block(b, reinterpret_cast<std::byte*>(block.data()), n);
      const std::int64_t lo = std::max(begin, b0), hi = std::min(begin + count, b0 + n);
      std::copy(block.begin() + (lo - b0), block.begin() + (hi - b0), out.begin() + (lo - begin));
    }
    return out;
  }
  std::vector<float> all(static_cast<std::size_t>(begin + count));
  gen.fill(reinterpret_cast<std::byte*>(all.data()), begin + count);
  std::copy(all.begin() + begin, all.end(), out.begin());
  return out;
}

void write_model_folder(const std::string& dir, const std::function<void(const std::string& tmp_dir)>& write) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.empty()) input_error("synth: empty output folder name");
  if (!target.has_filename()) target = target.parent_path();  // "out/" -> "out"
  std::error_code ec;
  const auto st = fs::symlink_status(target, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st)) input_error("{}: exists and is not a folder", dir);
  if (exists) {
    // Replacing the folder must not destroy anything but an earlier model.
    for (const auto& entry : fs::directory_iterator(target, ec)) {
      const std::string f = entry.path().filename().string();
      if (!is_model_file(f) || !entry.is_regular_file())
        input_error("{}: holds '{}', which is not part of a model folder; choose another output folder", dir, f);
    }
    if (ec) input_error("{}: cannot list ({})", dir, ec.message());
  }
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) input_error("{}: cannot create the parent folder ({})", dir, ec.message());
  AtomicFolder folder(target.string());
  write(folder.temp_path());
  folder.commit();
}

void write_synth_model(const ModelConfig& c, std::uint64_t seed, const std::string& dir, const SynthProgress& progress,
                       const SynthOptions& opt) {
  c.validate("synth config");
  write_model_folder(dir, [&](const std::string& tmp) {
    write_text(fs::path(tmp) / "config.json", config_to_json(c).dump(2) + "\n");
    write_model_file(c, seed, fs::path(tmp) / "model.safetensors", progress, opt);
  });
}

void write_text_file(const std::string& path, const std::string& text) { write_text(path, text); }

}  // namespace tdiff
