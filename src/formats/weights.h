#pragma once
// The weights a config implies, checked against a model folder, and handed to backends as
// float64 (converted once, cached).
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "model/config.h"
#include "formats/release_weights.h"
#include "formats/safetensors.h"
#include "formats/weight_spec.h"

namespace tdiff {

class WeightStore {
 public:
  // Opens the folder (HF layout, or DeepSeek's release layout: release names, FP8 linears and
  // FP4 experts; formats/release_format.h) and checks that every expected weight is present with
  // its shape and a suitable dtype; throws InputError naming the file and the tensor otherwise.
  WeightStore(const std::string& dir, const ModelConfig& c);
  const ModelWeights& files() const { return weights_; }
  // The folder is in the release layout: its tensors carry release names, so files() cannot be
  // asked for HF names (f64/i64 can).
  bool release_layout() const { return release_.has_value(); }
  // Whether the model of the config has parameter `name` (HF naming), and its shape.
  bool has(const std::string& name) const { return specs_.count(name) != 0; }
  const Shape& shape(const std::string& name) const { return specs_.at(name).shape; }
  // The parameter as the folder stores it when that is one full-precision tensor (a view into
  // the mapping: F32, BF16, ...); undefined when it is stored quantised (release FP8/FP4), so
  // only f64() gives its values.
  Tensor stored(const std::string& name) const;
  // How the folder stores parameter `name`: plain (stored() gives it), or quantised in the
  // release layout (fp8: one tensor and its block scales; fp4: the routed experts, per expert),
  // whose parts a backend may keep as they are (the hip backend dequantises them in its GEMMs).
  ReleaseFormat stored_format(const std::string& name) const;
  ReleaseWeights::QuantParts fp8_parts(const std::string& name) const { return release_->fp8_parts(name); }
  std::vector<ReleaseWeights::QuantParts> fp4_parts(const std::string& name, std::int64_t expert) const {
    return release_->fp4_parts(name, expert);
  }
  // The parameter as float64 (integer tensors as i64), converted on first use. The reference
  // stays valid until the next trim().
  const Tensor& f64(const std::string& name);
  const Tensor& i64(const std::string& name);

  // Not cached, so the memory they take ends with the caller's use (weights too large to hold
  // converted: the lm_head and embedding at real widths, a layer's routed experts), and safe to
  // call from several threads at once:
  // rows [r0, r1) of a matrix parameter as float64, written to dst ([r1 - r0, columns]);
  void rows_f64(const std::string& name, std::int64_t r0, std::int64_t r1, double* dst) const;
  // one routed expert's slice [R, C] of a stacked expert parameter [E, R, C] as float64, or
  // rows [r0, r1) of it, columns [c0, c1) (c1 < 0: all), written to dst ([r1 - r0, c1 - c0]).
  // The pages the rows take in the mapping are released with their last column, so a caller
  // converting a tile piece by piece asks for its columns in order.
  Tensor expert_f64(const std::string& name, std::int64_t expert) const;
  void expert_rows_f64(const std::string& name, std::int64_t expert, std::int64_t r0, std::int64_t r1, double* dst,
                       std::int64_t c0 = 0, std::int64_t c1 = -1) const;
  // Whether a parameter is too large to convert whole (more than stream_bytes() as float64):
  // the reference then streams it by rows (the lm_head and embedding at real widths, 129280 x
  // 4096: 4.2 GB; every other real-width matrix is at most 268 MB). Default 512 MiB; tests
  // set 0 to stream everything (the bits are the same either way).
  bool streamed(const std::string& name) const;
  std::size_t stream_bytes() const { return stream_bytes_; }
  void set_stream_bytes(std::size_t bytes) { stream_bytes_ = bytes; }

  // Drops the least recently used converted tensors until the cache holds at most its budget,
  // and the pages of the model files the process has read (SafetensorsFile::release_pages).
  // The executor calls it between stages, when no stage holds a reference: a float64 copy of a
  // V4-Flash-sized layer is ~52 GB, so a 2-layer model would not fit in memory otherwise.
  void trim();
  // Reads every float parameter once, in blocks of rows (memory stays bounded at real widths),
  // and throws InputError naming the first that holds a NaN or Inf (case new: a case is not
  // made from weights the reference would refuse at their stage).
  void check_all_finite();
  // Budget in bytes: TDIFF_WEIGHT_CACHE_GB if set, else 2 GiB (a real-width layer's weights
  // other than its routed experts, which are converted one expert at a time, are 1.1 GB).
  std::size_t budget() const { return budget_; }
  void set_budget(std::size_t bytes) { budget_ = bytes; }
  std::size_t cached_bytes() const { return bytes_; }

 private:
  struct Entry {
    Tensor tensor;
    std::uint64_t used = 0;  // tick of the last access
  };
  const Tensor& remember(const std::string& name, Tensor t);

  Tensor load_f64(const std::string& name) const;  // converted, not cached
  void check_finite(const std::string& name, const double* v, std::int64_t n) const;  // InputError naming the weight
  void check_finite(const std::string& name, const Tensor& t) const { check_finite(name, t.data<double>(), t.numel()); }

  ModelWeights weights_;
  std::optional<ReleaseWeights> release_;
  std::map<std::string, WeightSpec> specs_;
  std::map<std::string, Entry> cache_;
  std::uint64_t tick_ = 0;
  std::size_t bytes_ = 0;
  std::size_t budget_;
  std::size_t stream_bytes_ = std::size_t{512} << 20;
  std::mutex mutex_;
};

}  // namespace tdiff
