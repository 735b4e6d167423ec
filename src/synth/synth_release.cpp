#include "synth/synth_release.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/parallel_errors.h"
#include "formats/release_format.h"
#include "formats/safetensors.h"
#include "formats/weights.h"

namespace tdiff {

namespace fs = std::filesystem;
using json = nlohmann::json;

json release_config_json(const ModelConfig& c) {
  json j = config_to_json(c);
  // The release states the schedule with DeepSeek's keys (model-spec §1.3): compress_ratios with one
  // more entry for the multi-token-prediction layer (not part of the forward pass; tdiff
  // truncates the list), and num_hash_layers, which can only say "the first k layers".
  std::int64_t hash_layers = 0;
  while (hash_layers < c.num_hidden_layers && c.mlp_types[static_cast<std::size_t>(hash_layers)] == MlpType::hash_moe)
    ++hash_layers;
  for (std::int64_t l = hash_layers; l < c.num_hidden_layers; ++l)
    if (c.mlp_types[static_cast<std::size_t>(l)] == MlpType::hash_moe)
      input_error("synth --format release: layer {} is hash-routed after a score-routed layer; the release config "
                  "(num_hash_layers) can only make the first layers hash-routed",
                  l);
  json ratios = json::array();
  for (LayerType t : c.layer_types) ratios.push_back(t == LayerType::sliding ? 0 : t == LayerType::csa ? 4 : 128);
  ratios.push_back(0);  // the MTP layer's entry
  j.erase("layer_types");
  j.erase("mlp_layer_types");
  j.erase("partial_rotary_factor");  // qk_rope_head_dim says it
  if (c.csa_rate == 4 && c.hca_rate == 128) j.erase("compress_rates");  // the release relies on the defaults
  j["compress_ratios"] = ratios;
  j["num_hash_layers"] = hash_layers;
  j["num_nextn_predict_layers"] = 1;
  j["topk_method"] = "noaux_tc";
  j["expert_dtype"] = "fp4";
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  j["torch_dtype"] = "bfloat16";
  return j;
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// One HF parameter and the release tensors that store it.
struct Param {
  std::string hf;
  WeightSpec spec;
  ReleaseName release;
  std::int64_t rows = 1, cols = 1;  // the parameter as [rows, cols] (cols = last dimension)
  DType plain_dtype = DType::f32;   // plain: the release dtype (BF16, F32 or I64)
  // Release tensors in the order encode() fills them: plain {w}; fp8 {codes, scale};
  // fp4 {codes, scale} per expert and part. Each as (shard, entry index in that shard).
  std::vector<std::pair<std::size_t, std::size_t>> where;
  std::vector<SafetensorsStream::Entry> entries;
};

int layer_of(const std::string& hf) {
  if (!hf.starts_with("model.layers.")) return hf == "model.embed_tokens.weight" ? -1 : 1 << 30;
  return std::atoi(hf.c_str() + 13);
}

Param make_param(const std::string& hf, const WeightSpec& spec) {
  Param p;
  p.hf = hf;
  p.spec = spec;
  p.release = *release_name(hf);
  p.cols = spec.shape.empty() ? 1 : spec.shape.back();
  p.rows = shape_numel(spec.shape) / std::max<std::int64_t>(p.cols, 1);
  const auto& rn = p.release;
  if (rn.format == ReleaseFormat::plain) {
    p.plain_dtype = synth_storage(hf, spec, DType::bf16);
    const char* st = p.plain_dtype == DType::i64 ? "I64" : p.plain_dtype == DType::bf16 ? "BF16" : "F32";
    p.entries.push_back({rn.name, st, spec.shape, static_cast<std::uint64_t>(shape_numel(spec.shape)) * dtype_size(p.plain_dtype)});
  } else if (rn.format == ReleaseFormat::fp8) {
    const std::int64_t O = spec.shape.at(0), K = spec.shape.at(1);
    p.entries.push_back({rn.name, "F8_E4M3", {O, K}, static_cast<std::uint64_t>(O * K)});
    const Shape s{ceil_div(O, 128), ceil_div(K, 128)};
    p.entries.push_back({scale_name(rn.name), "F8_E8M0", s, static_cast<std::uint64_t>(s[0] * s[1])});
  } else {
    const std::int64_t E = spec.shape.at(0), per_part = spec.shape.at(1) / static_cast<std::int64_t>(rn.parts.size()),
                       K = spec.shape.at(2);
    for (std::int64_t e = 0; e < E; ++e)
      for (const auto& part : rn.parts) {
        const std::string t = fmt::format("{}{}.{}.weight", rn.name, e, part);
        p.entries.push_back({t, "I8", {per_part, ceil_div(K, 2)}, static_cast<std::uint64_t>(per_part * ceil_div(K, 2))});
        p.entries.push_back({scale_name(t), "F8_E8M0", {per_part, ceil_div(K, 32)},
                             static_cast<std::uint64_t>(per_part * ceil_div(K, 32))});
      }
  }
  return p;
}

// Rows encoded into release bytes and written where they belong.
class Encoder {
 public:
  Encoder(const Param& p, std::vector<std::unique_ptr<SafetensorsStream>>& shards) : p_(p), shards_(shards) {}

  // Rows [r0, r1) from their float32 values (row-major, cols per row); returns bytes written.
  std::uint64_t encode(std::int64_t r0, std::int64_t r1, const std::vector<float>& v) {
    switch (p_.release.format) {
      case ReleaseFormat::plain: return plain(r0, v);
      case ReleaseFormat::fp8: return fp8(r0, r1, v);
      case ReleaseFormat::fp4: return fp4(r0, r1, v);
    }
    return 0;
  }

 private:
  void put(std::size_t tensor, std::uint64_t at, const void* data, std::size_t n) {
    const auto [shard, entry] = p_.where[tensor];
    shards_[shard]->write(shards_[shard]->data_offset(entry) + at, data, n);
  }

  std::uint64_t plain(std::int64_t r0, const std::vector<float>& v) {
    const std::size_t es = dtype_size(p_.plain_dtype);
    std::vector<std::byte> out(v.size() * es);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (p_.plain_dtype == DType::bf16) {
        const std::uint16_t b = bf16_bits(v[i]);
        std::memcpy(out.data() + 2 * i, &b, 2);
      } else {
        std::memcpy(out.data() + 4 * i, &v[i], 4);
      }
    }
    put(0, static_cast<std::uint64_t>(r0 * p_.cols) * es, out.data(), out.size());
    return out.size();
  }

  // 128-row groups: one E8M0 exponent per 128 x 128 block, codes = e4m3(w / scale).
  std::uint64_t fp8(std::int64_t r0, std::int64_t r1, const std::vector<float>& v) {
    const std::int64_t K = p_.cols, blocks = ceil_div(K, 128);
    std::vector<std::uint8_t> codes(v.size()), scales(static_cast<std::size_t>(ceil_div(r1 - r0, 128) * blocks));
    for (std::int64_t g = 0; g * 128 < r1 - r0; ++g)
      for (std::int64_t j = 0; j < blocks; ++j) {
        const std::int64_t ra = g * 128, rb = std::min(r1 - r0, ra + 128), ka = j * 128, kb = std::min(K, ka + 128);
        double amax = 0;
        for (std::int64_t r = ra; r < rb; ++r)
          for (std::int64_t k = ka; k < kb; ++k) amax = std::max(amax, std::fabs(static_cast<double>(v[static_cast<std::size_t>(r * K + k)])));
        const std::uint8_t e = e8m0_exponent_for(amax, 448.0);
        scales[static_cast<std::size_t>(g * blocks + j)] = e;
        const double inv = std::ldexp(1.0, 127 - e);  // exact: a power of two
        for (std::int64_t r = ra; r < rb; ++r)
          for (std::int64_t k = ka; k < kb; ++k) {
            const auto i = static_cast<std::size_t>(r * K + k);
            codes[i] = f8e4m3_bits(static_cast<double>(v[i]) * inv);
          }
      }
    put(0, static_cast<std::uint64_t>(r0 * K), codes.data(), codes.size());
    put(1, static_cast<std::uint64_t>(r0 / 128 * blocks), scales.data(), scales.size());
    return codes.size() + scales.size();
  }

  // One expert part's rows at a time (they are contiguous in its release tensor).
  std::uint64_t fp4(std::int64_t r0, std::int64_t r1, const std::vector<float>& v) {
    const std::int64_t K = p_.cols, packed = ceil_div(K, 2), groups = ceil_div(K, 32);
    const std::int64_t per_expert = p_.spec.shape.at(1);
    const std::int64_t per_part = per_expert / static_cast<std::int64_t>(p_.release.parts.size());
    std::uint64_t bytes = 0;
    std::vector<std::uint8_t> codes, scales;
    for (std::int64_t r = r0; r < r1;) {
      const std::int64_t part_index = r / per_part;  // counts over experts and parts
      const std::int64_t first = r % per_part, end = std::min(r1, (part_index + 1) * per_part);
      codes.assign(static_cast<std::size_t>((end - r) * packed), 0);
      scales.assign(static_cast<std::size_t>((end - r) * groups), 0);
      for (std::int64_t i = 0; i < end - r; ++i) {
        const float* row = v.data() + (r - r0 + i) * K;
        for (std::int64_t g = 0; g < groups; ++g) {
          double amax = 0;
          for (std::int64_t k = g * 32; k < std::min(K, g * 32 + 32); ++k) amax = std::max(amax, std::fabs(static_cast<double>(row[k])));
          const std::uint8_t e = e8m0_exponent_for(amax, 6.0);
          scales[static_cast<std::size_t>(i * groups + g)] = e;
          const double inv = std::ldexp(1.0, 127 - e);
          for (std::int64_t k = g * 32; k < std::min(K, g * 32 + 32); ++k) {
            const std::uint8_t code = e2m1_code(static_cast<double>(row[k]) * inv);
            auto& byte = codes[static_cast<std::size_t>(i * packed + k / 2)];
            byte = static_cast<std::uint8_t>(k % 2 == 0 ? (byte & 0xF0u) | code : (byte & 0x0Fu) | (code << 4));
          }
        }
      }
      const auto tensor = static_cast<std::size_t>(2 * part_index);  // codes, then scale, per part
      put(tensor, static_cast<std::uint64_t>(first * packed), codes.data(), codes.size());
      put(tensor + 1, static_cast<std::uint64_t>(first * groups), scales.data(), scales.size());
      bytes += codes.size() + scales.size();
      r = end;
    }
    return bytes;
  }

  const Param& p_;
  std::vector<std::unique_ptr<SafetensorsStream>>& shards_;
};

// Rows per work item: the whole parameter when it is drawn as one stream, else about one
// random-number block (whole quantisation groups) so each block is drawn about once.
std::int64_t rows_per_item(const Param& p) {
  if (shape_numel(p.spec.shape) <= kSynthBlock || p.spec.integer) return p.rows;
  const std::int64_t group = p.release.format == ReleaseFormat::fp8 ? 128 : 1;
  return std::max(group, kSynthBlock / p.cols / group * group);
}

ReleaseWriteTimes write_release_files(const ModelConfig& c, std::uint64_t seed, const fs::path& dir,
                                      const SynthProgress& progress, const ReleaseOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Param> params;
  for (const auto& [hf, spec] : expected_weights(c)) params.push_back(make_param(hf, spec));
  std::stable_sort(params.begin(), params.end(), [](const Param& a, const Param& b) { return layer_of(a.hf) < layer_of(b.hf); });

  // Shards in layer order, a new one once the current one holds shard_bytes.
  std::vector<std::vector<SafetensorsStream::Entry>> shard_entries(1);
  std::vector<std::uint64_t> shard_size(1, 0);
  std::vector<std::size_t> shard_of(params.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::uint64_t bytes = 0;
    for (const auto& e : params[i].entries) bytes += e.bytes;
    if (shard_size.back() > 0 && shard_size.back() + bytes > opt.shard_bytes) {
      shard_entries.emplace_back();
      shard_size.push_back(0);
    }
    shard_of[i] = shard_entries.size() - 1;
    for (const auto& e : params[i].entries) shard_entries.back().push_back(e);
    shard_size.back() += bytes;
    total += bytes;
  }
  const std::size_t n = shard_entries.size();
  std::vector<std::string> shard_names;
  std::vector<std::unique_ptr<SafetensorsStream>> shards;
  for (std::size_t s = 0; s < n; ++s) {
    shard_names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n));
    shards.push_back(std::make_unique<SafetensorsStream>((dir / shard_names.back()).string(), shard_entries[s],
                                                         std::map<std::string, std::string>{{"format", "pt"}}));
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < params.size(); ++i)
    for (const auto& e : params[i].entries) {
      params[i].where.emplace_back(shard_of[i], shards[shard_of[i]]->index(e.name));
      weight_map[e.name] = shard_names[shard_of[i]];
    }
  write_text_file((dir / "model.safetensors.index.json").string(),
                  json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");

  struct Item {
    std::size_t param;
    std::int64_t r0, r1;
  };
  std::vector<Item> items;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t step = rows_per_item(params[i]);
    for (std::int64_t r = 0; r < params[i].rows; r += step) items.push_back({i, r, std::min(params[i].rows, r + step)});
  }
  std::uint64_t done = 0;
  std::exception_ptr failure;
  const SynthOptions draw{opt.outliers, DType::f32, opt.profile};
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t w = 0; w < items.size(); ++w) {
    try {
      const Item& it = items[w];
      const Param& p = params[it.param];
      std::uint64_t bytes;
      if (p.spec.integer) {  // tid2eid, as the HF model stores it
        const Tensor t = synth_weight(c, p.hf, p.spec, seed, draw);
        const auto [shard, entry] = p.where[0];
        shards[shard]->write(shards[shard]->data_offset(entry), t.raw(), t.nbytes());
        bytes = t.nbytes();
      } else {
        const auto v = synth_values(c, p.hf, p.spec, seed, draw, it.r0 * p.cols, (it.r1 - it.r0) * p.cols);
        bytes = Encoder(p, shards).encode(it.r0, it.r1, v);
      }
#pragma omp critical(tdiff_release_progress)
      {
        done += bytes;
        if (progress) progress(done, total);
      }
    } catch (...) {
#pragma omp critical(tdiff_release_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  const auto t1 = std::chrono::steady_clock::now();
  ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < shards.size(); ++i) errors.run(i, [&] { shards[i]->close(); });
  errors.rethrow();
  const auto t2 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
}

}  // namespace

ReleaseWriteTimes write_release_model(const ModelConfig& c, std::uint64_t seed, const std::string& dir,
                                      const SynthProgress& progress, const ReleaseOptions& opt) {
  c.validate("synth config");
  const json config = release_config_json(c);
  ReleaseWriteTimes times;
  write_model_folder(dir, [&](const std::string& tmp) {
    write_text_file((fs::path(tmp) / "config.json").string(), config.dump(2) + "\n");
    times = write_release_files(c, seed, tmp, progress, opt);
  });
  return times;
}

}  // namespace tdiff
