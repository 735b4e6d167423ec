#include "formats/weights.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/parallel_errors.h"

namespace tdiff {

namespace {
std::size_t default_weight_budget() {
  if (const char* gb = std::getenv("TDIFF_WEIGHT_CACHE_GB")) {
    char* end = nullptr;
    const double v = std::strtod(gb, &end);
    if (end == gb || *end != '\0' || !(v > 0))
      input_error("TDIFF_WEIGHT_CACHE_GB: '{}' is not a positive number of GB", gb);
    return static_cast<std::size_t>(v * 1e9);
  }
  return std::size_t{2} << 30;
}

// An HF-layout parameter: present, with the config's shape and a float (integer) dtype.
void check_hf_weight(const ModelWeights& w, const std::string& name, const WeightSpec& spec) {
  if (!w.has(name)) input_error("{}: weight '{}' is missing (the config needs it)", w.dir(), name);
  const TensorInfo& info = w.info(name);
  if (info.shape != spec.shape)
    input_error("{}: weight '{}' has shape {}, the config implies {}", w.dir(), name, shape_str(info.shape),
                shape_str(spec.shape));
  const bool is_int = info.dtype == DType::i64 || info.dtype == DType::i32;
  if (spec.integer ? !is_int : !is_float(info.dtype))
    input_error("{}: weight '{}' has dtype {}, expected {}", w.dir(), name, dtype_name(info.dtype),
                spec.integer ? "an integer type" : "a float type");
}
}  // namespace

WeightStore::WeightStore(const std::string& dir, const ModelConfig& c)
    : weights_(dir), specs_(expected_weights(c)), budget_(default_weight_budget()) {
  if (is_release_layout(weights_)) {
    release_.emplace(weights_);
    for (const auto& [name, spec] : specs_) release_->check(name, spec);
    // The storage the release's config states, against its tensors (the config a case stores
    // is the same text; a folder without one has nothing to state).
    const std::string config = dir + "/config.json";
    if (std::error_code ec; std::filesystem::is_regular_file(config, ec))
      release_->check_quantization(parse_config_json(read_text_file(config), config), config, specs_);
  } else {
    for (const auto& [name, spec] : specs_) check_hf_weight(weights_, name, spec);
  }
  const auto V = c.vocab_size, E = c.n_routed_experts;
  for (const auto& [name, spec] : specs_) {
    if (!spec.integer) continue;
    const Tensor& t = i64(name);
    for (std::int64_t v : t.span<const std::int64_t>())
      if (v < 0 || v >= E) input_error("{}: weight '{}' holds expert id {} outside 0..{}", dir, name, v, E - 1);
    (void)V;
  }
}

const Tensor& WeightStore::remember(const std::string& name, Tensor t) {
  bytes_ += t.nbytes();
  Entry& e = cache_.emplace(name, Entry{std::move(t), 0}).first->second;
  e.used = ++tick_;
  return e.tensor;
}

const Tensor& WeightStore::f64(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(name);
  if (it != cache_.end()) {
    it->second.used = ++tick_;
    return it->second.tensor;
  }
  if (!specs_.count(name)) throw std::logic_error("weight not in the model spec: " + name);
  Tensor out = load_f64(name);
  check_finite(name, out);
  return remember(name, std::move(out));
}

const Tensor& WeightStore::i64(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(name);
  if (it != cache_.end()) {
    it->second.used = ++tick_;
    return it->second.tensor;
  }
  if (release_) return remember(name, release_->i64(name));
  Tensor t = weights_.tensor(name);
  return remember(name, t.dtype() == DType::i64 ? t.clone() : t.to(DType::i64));
}

Tensor WeightStore::stored(const std::string& name) const {
  if (!specs_.count(name)) throw std::logic_error("weight not in the model spec: " + name);
  if (!release_) return weights_.tensor(name);
  return release_->stored(name);
}

ReleaseFormat WeightStore::stored_format(const std::string& name) const {
  if (!specs_.count(name)) throw std::logic_error("weight not in the model spec: " + name);
  return release_ ? release_->stored_format(name) : ReleaseFormat::plain;
}

void WeightStore::check_finite(const std::string& name, const double* v, std::int64_t n) const {
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (n > (std::int64_t{1} << 20))
  for (std::int64_t b = 0; b < (n + kBlock - 1) / kBlock; ++b)
    finite = all_finite(v + b * kBlock, std::min(kBlock, n - b * kBlock)) && finite;
  if (!finite) input_error("{}: weight '{}' holds a non-finite value", weights_.dir(), name);
}

void WeightStore::rows_f64(const std::string& name, std::int64_t r0, std::int64_t r1, double* dst) const {
  const Shape& shape = specs_.at(name).shape;
  if (shape.size() != 2) throw std::logic_error("rows_f64 of a parameter that is not a matrix: " + name);
  const std::int64_t cols = shape[1];
  auto put = [&](const Tensor& part, std::int64_t at) {
    check_finite(name, part);
    std::memcpy(dst + (at - r0) * cols, part.data<double>(), part.nbytes());
  };
  const Tensor plain = release_ ? release_->stored(name) : weights_.tensor(name);
  if (plain.defined()) {  // unquantised (every HF-layout weight; the release's BF16 embedding and head)
    const Tensor part = plain.rows(r0, r1);
    part.to_f64(dst);
    release_resident_pages(part.raw(), part.nbytes());  // streamed: read once per product
    check_finite(name, dst, (r1 - r0) * cols);
    return;
  }
  // FP8 with 128 x 128 block scales: one piece per block of rows, with that block's scales.
  const auto [fp8, scale, what] = release_->fp8_parts(name);
  for (std::int64_t b0 = r0; b0 < r1;) {
    const std::int64_t block = b0 / 128, b1 = std::min(r1, (block + 1) * 128);
    const Tensor codes = fp8.rows(b0, b1);
    put(dequantize_fp8(codes, scale.rows(block, block + 1), what), b0);
    release_resident_pages(codes.raw(), codes.nbytes());
    b0 = b1;
  }
}

bool WeightStore::streamed(const std::string& name) const {
  return static_cast<std::size_t>(shape_numel(specs_.at(name).shape)) * sizeof(double) > stream_bytes_;
}

Tensor WeightStore::expert_f64(const std::string& name, std::int64_t expert) const {
  const Shape& shape = specs_.at(name).shape;
  Tensor out(DType::f64, {shape.at(1), shape.at(2)});
  expert_rows_f64(name, expert, 0, shape.at(1), out.data<double>());
  return out;
}

void WeightStore::expert_rows_f64(const std::string& name, std::int64_t expert, std::int64_t r0, std::int64_t r1,
                                  double* dst, std::int64_t c0, std::int64_t c1) const {
  const WeightSpec& spec = specs_.at(name);
  if (spec.shape.size() != 3) throw std::logic_error("expert rows of a parameter that is not stacked: " + name);
  const std::int64_t R = spec.shape[1], C = spec.shape[2];
  if (c1 < 0) c1 = C;
  if (release_) {
    release_->expert_rows_f64(name, spec, expert, r0, r1, dst, c0, c1);
    check_finite(name, dst, (r1 - r0) * (c1 - c0));
    return;
  }
  const Tensor part = weights_.tensor(name).rows(expert, expert + 1).reshaped({R, C}).rows(r0, r1);
  // Checked in the conversion's pass; check_finite only to name the weight.
  if (!part.cols_to_f64(c0, c1, dst)) check_finite(name, dst, (r1 - r0) * (c1 - c0));
  if (c1 == C) release_resident_pages(part.raw(), part.nbytes());  // each tile is read once per stage
}

Tensor WeightStore::load_f64(const std::string& name) const {
  if (release_) return release_->f64(name, specs_.at(name));
  Tensor t = weights_.tensor(name);
  return t.dtype() == DType::f64 ? t.clone() : t.to(DType::f64);
}

void WeightStore::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  weights_.release_pages();  // what the stage read of the files is no longer this process's memory
  while (bytes_ > budget_ && !cache_.empty()) {
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    bytes_ -= oldest->second.tensor.nbytes();
    cache_.erase(oldest);
  }
}

void WeightStore::check_all_finite() {
  // Work items in name order (blocks of rows of one expert; vectors whole), on all threads;
  // the error names the first item's weight, whatever the thread count.
  constexpr std::int64_t kBlockElems = std::int64_t{1} << 21;  // 16 MiB of float64 per block
  struct Item {
    const std::string* name;
    std::int64_t expert, r0, r1;  // expert -1: a vector, whole
  };
  std::vector<Item> items;
  for (const auto& [name, spec] : specs_) {
    if (spec.integer) continue;
    const Shape& s = spec.shape;
    if (s.size() == 2 || s.size() == 3) {
      const std::int64_t R = s[s.size() - 2], C = s.back(), E = s.size() == 3 ? s[0] : 1;
      const std::int64_t step = std::max<std::int64_t>(1, kBlockElems / std::max<std::int64_t>(C, 1));
      for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t r0 = 0; r0 < R; r0 += step) items.push_back({&name, e, r0, std::min(R, r0 + step)});
    } else {
      items.push_back({&name, -1, 0, 0});
    }
  }
  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<double> buf;
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < items.size(); ++i)
      errors.run(i, [&] {
        const Item& it = items[i];
        const Shape& s = specs_.at(*it.name).shape;
        if (it.expert < 0) return check_finite(*it.name, load_f64(*it.name));
        buf.resize(static_cast<std::size_t>((it.r1 - it.r0) * s.back()));
        if (s.size() == 2) rows_f64(*it.name, it.r0, it.r1, buf.data());  // both check the values
        else expert_rows_f64(*it.name, it.expert, it.r0, it.r1, buf.data());
      });
  }
  errors.rethrow();
}

}  // namespace tdiff
