#pragma once
// The model's weights on the device, kept for the life of the process: one cache per model
// folder, shared by every hip backend built on it (a bisect's candidate and floor, an audit's
// policies, determinism's runs), so each weight crosses the link once per session.
// Weights are kept in the form the kernels read them:
//   - GEMM weights on the matrix-core path: 16-bit patterns, or, for a release checkpoint's
//     FP8 linears and FP4 experts, the codes and scales as stored (GemmWeight::quant; the
//     kernels decode them while staging, hip/gemm.h): 1.06 bytes a weight for FP8, 0.53 for FP4;
//     or, when the decoded model fits the budget (TDIFF_HIP_DECODE, below), those codes decoded
//     once on the device into the operands' 16-bit patterns, which the pipelined kernel reads:
//     the same operands (the in-kernel decode is tested bit for bit against them), 2 bytes a
//     weight, and the GEMMs at the speed of a bf16 checkpoint's;
//   - every other use: float32 values rounded as an operand of a format (a release weight is
//     dequantised on the device from its codes, never through a host float64 copy).
//
// Models larger than the device: when the model's files exceed the budget (the device's free
// memory less a reserve for activations, or TDIFF_HIP_WEIGHT_GB), the weights of the decoder
// layers are streamed: when the forward asks for the first weight of layer L, the layers
// before L are dropped and layer L + 1 is uploaded by a second thread on its own stream while
// layer L computes (every (weight, form) a layer has asked for so far, renamed to L + 1; what
// it has not asked for yet loads when asked). Weights outside the layers stay. The kernels
// read the same bytes either way, so the outputs are those of the resident run.
// Every upload ends with a stream sync, so any backend's stream may read a weight at once.
// Streamed uploads read the shards with pread into pinned memory (PinnedReader), not through
// the mapping's page faults.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/weights.h"
#include "emu/arith.h"
#include "hip/device.h"
#include "hip/gemm.h"
#include "hip/pinned_reader.h"

namespace tdiff::hip {

class DeviceWeights {
 public:
  // The cache of the model folder `w` reads. Keyed by the folder and its shards' sizes and
  // modification times: a folder rewritten in place (tests reuse paths) is another model.
  static std::shared_ptr<DeviceWeights> of(const WeightStore& w);
  explicit DeviceWeights(const WeightStore& w);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Weight `name` as float32 rounded as an operand of `in` (fp8: 128x128 power-of-two blocks,
  // quantize_weight).
  const float* f32(WeightStore& w, const std::string& name, arith::Fmt in, Stream s);
  // A GEMM's weight under `spec`: on the matrix-core path its 16-bit patterns, or its release
  // codes as stored; else f32(name, spec.in).
  GemmWeight gemm(WeightStore& w, const std::string& name, const GemmSpec& spec, Stream s);
  // Whether every value of `name` is a bf16 number (stored as BF16, or checked on the device
  // once: float32 files and release codes may hold only bf16 numbers), so an SGEMM of it may
  // run on the matrix cores.
  bool holds_bf16(WeightStore& w, const std::string& name, Stream s);
  // An integer weight (tid2eid), uploaded once.
  const std::int64_t* table_i64(WeightStore& w, const std::string& name, Stream s);

  // Whether the decoder layers' weights are streamed (decided at the first weight: the
  // model's files against the budget), the budget and the model's bytes.
  bool streamed() const { return streamed_; }
  // How release codes reach the matrix-core GEMMs. TDIFF_HIP_DECODE=kernel: as stored, decoded
  // by the kernels while staging; once: decoded on the device at upload into 16-bit operands;
  // auto (default): once when the model decoded (decoded_bytes) fits the budget and is not
  // streamed, kernel otherwise. The GEMMs' bits are the same either way.
  bool decode_once() const { return decode_once_; }
  bool holds_codes() const { return holds_codes_; }  // the model has FP8 or FP4 release codes
  std::size_t decoded_bytes() const { return decoded_bytes_; }
  std::size_t budget() const { return budget_; }
  std::size_t model_bytes() const { return model_bytes_; }
  // Device bytes held now, and the seconds the forward waited for layer uploads (streaming).
  std::size_t bytes() const;
  double wait_s() const { return wait_s_; }
  // Waits for a layer upload in flight (the backend's finish(): no upload may outlive the
  // WeightStore it reads).
  void settle();

 private:
  // The forms a weight is held in (the key's second part, with the operand format).
  enum Form : int { kF32 = 0, kBits16 = 100, kQuant = 200, kBf16Flag = 300, kTable = 400 };
  using Key = std::pair<std::string, int>;
  struct Held {
    DeviceBuffer buf, scale;  // the values; a release weight's scales
    QuantWeight quant;        // kQuant: the view of buf and scale
    bool flag = false;        // kBf16Flag
    std::size_t bytes() const { return buf.bytes() + scale.bytes(); }
  };
  // The held form `key` of a weight, made by `make` on stream `s` the first time (outside the
  // lock; a second caller of the same key waits for the first).
  const Held& obtain(WeightStore& w, const Key& key, Stream s);
  Held make(WeightStore& w, const Key& key, Stream s);
  // Uncached float32 of `name` rounded as an operand of `in`.
  DeviceBuffer load(WeightStore& w, const std::string& name, arith::Fmt in, Stream s);
  Held upload_fp8(WeightStore& w, const std::string& name, Stream s);
  Held upload_fp4(WeightStore& w, const std::string& name, Stream s);
  // A release weight decoded into the 16-bit patterns of operands of `in` (bf16, f16).
  DeviceBuffer decode_bits16(WeightStore& w, const std::string& name, arith::Fmt in, Stream s);
  // Copies `bytes` of a weight from `src` to the device. Streaming, bytes of a shard's mapping (a
  // tensor view) are read from the file into pinned staging buffers (PinnedReader), since every
  // forward reads the layers again; otherwise, and for any other host memory, copied as they are.
  void upload_bytes(WeightStore& w, void* dst, const void* src, std::size_t bytes, Stream s);

  // Streaming: called with every request of the forward (not the prefetcher's).
  void on_request(WeightStore& w, const Key& key, Stream s);
  void prefetch(WeightStore& w, const std::vector<Key>& keys);

  std::map<Key, std::unique_ptr<Held>> held_;
  std::set<Key> loading_;
  mutable std::mutex mutex_;
  std::condition_variable done_;

  bool streamed_ = false, decode_once_ = false, holds_codes_ = false;
  std::size_t budget_ = 0, model_bytes_ = 0, decoded_bytes_ = 0;
  int layer_ = -1;                           // the layer the forward is in (streaming)
  std::set<Key> pattern_;                    // (name after "model.layers.{i}.", form) asked so far
  std::thread prefetcher_;
  PinnedReader reader_;
  Stream upload_ = nullptr;                  // the prefetcher's stream
  double wait_s_ = 0;
};

}  // namespace tdiff::hip
