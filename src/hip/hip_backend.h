#pragma once
// The hip backend: every stage kind as GPU kernels under a numerics policy, with the same
// knobs and meanings as emu (emu is the specification of the arithmetic). Tensors stay on the
// device between stages (keyed "<stage>/<tensor>"); each output is copied as the numbers it
// holds (bf16/fp16 outputs as 16-bit patterns, other float outputs as float32, int64 / bool)
// into a pinned host tensor on one of two copy streams, so the host copies overlap the next stages;
// finish() waits for them. The diff engine reads every float dtype; refcpu widens them
// exactly in a mixed run. Inputs produced elsewhere (refcpu in a
// mixed run, the case inputs) are uploaded; a host tensor the backend itself returned is
// recognised by identity and not uploaded again. run() looks the stage's kind up in a table
// of per-family handlers (hip/stage_call.h).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "emu/arith.h"
#include "hip/device.h"
#include "hip/device_weights.h"
#include "hip/gemm.h"
#include "hip/run_compare.h"

namespace tdiff::hip {

class HipBackend final : public Backend {
 public:
  // run_seed: identity of the run for unstable top-k ties (atomic orders come from the GPU).
  HipBackend(Policy policy, std::uint64_t run_seed);
  ~HipBackend() override;
  std::string name() const override { return "hip"; }
  bool implements(OpKind kind) const override;
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override;
  bool deferred_outputs() const override { return true; }
  void finish() override;
  const Policy* policy() const override { return &policy_; }
  void release(const std::string& key) override;

  const DeviceInfo& device() const { return info_; }
  // gpu, gpu_arch, gpu_memory_bytes, gpu_driver, gpu_runtime, gpu_platform, gpu_wave_size, gpu_gemm,
  // gpu_weights (resident or streamed, sizes).
  std::map<std::string, std::string> environment() const override;
  std::string weights_description() const;
  // Which stages' outputs are copied to the host (default: all). A stage left out returns
  // undefined host tensors: only for runs where this backend runs every stage and nothing
  // reads those outputs on the host (the capture-overhead benchmark).
  void set_capture(std::function<bool(const Stage&)> capture) { capture_ = std::move(capture); }
  // Run-to-run comparison on the device (hip/run_compare.h): every output kept in `snapshot`
  // (keep: run 1) or compared with it there (a later run), and none copied to the host (the
  // outputs handed back are undefined: for determinism's runs, which read nothing else).
  void set_run_snapshot(std::shared_ptr<RunSnapshot> snapshot, bool keep) {
    snapshot_ = std::move(snapshot);
    snapshot_keep_ = keep;
  }
  // 16-bit GEMMs on the matrix cores (default where the device has them; `--hip-gemm`) or on
  // the vector ALU, whose sums equal emu's bit for bit. The
  // matrix cores sum inside each 16-deep product in the hardware's order: a few float ulps,
  // rarely one bf16 ulp, which near-tied routing can turn into a different expert.
  void set_matrix_cores(bool on) { matrix_cores_ = on && has_matrix_cores(info_.arch); }
  bool matrix_cores() const { return matrix_cores_; }
  // Bytes copied to the host since construction (every tapped output as copied).
  std::size_t captured_bytes() const { return captured_bytes_; }
  // Captured float32 logits go to the host in this many row blocks, each copied while the
  // next is computed (bench_hip --logit-blocks; the bits do not depend on it).
  void set_logit_blocks(int n) { logit_blocks_ = std::max(1, n); }  // callers check the range
  // Host copies alternate over this many copy streams (1 or 2; bench_hip --copy-streams).
  void set_copy_streams(int n) { copy_streams_ = std::clamp(n, 1, 2); }
  // Per-stage device time (events around each stage), read after finish().
  void set_timing(bool on) { timing_ = on; }
  std::vector<std::pair<std::string, double>> stage_ms() const;
  // With timing on, every host copy of a tapped output too: start and end in ms after the
  // first timed stage began, and its bytes (the capture's timeline on the link).
  struct CopySpan {
    double start_ms, end_ms;
    std::size_t bytes;
  };
  std::vector<CopySpan> copy_spans() const;
  double timed_forward_ms() const;  // first timed stage's start to the last one's end
  void clear_timing();

 private:
  struct DevTensor {
    std::shared_ptr<DeviceBuffer> buf;
    Shape shape;
    DType dtype = DType::f32;  // f32 (float values), i64, u8
    arith::Fmt fmt = arith::Fmt::f32;  // the format the values are already rounded to
    Tensor host;               // the host tensor this copy mirrors (identity check; kept alive)
    std::int64_t numel() const { return shape_numel(shape); }
    float* f() const { return buf->as<float>(); }
    std::int64_t* i64() const { return buf->as<std::int64_t>(); }
    std::uint8_t* u8() const { return buf->as<std::uint8_t>(); }
  };
  // A split's rank partials of one stage output [ranks, n] on the device, kept for the stage
  // that reduces them (moe.out under moe_reduce=sum_then_reduce), with the float64 sum the
  // stage handed back (emu's RankPartials).
  struct KeptPartials {
    std::shared_ptr<DeviceBuffer> buf;
    int ranks = 0;
    std::int64_t n = 0;
    Tensor sum;
  };
  struct Pending {  // a host copy in flight; both kept alive until it is done
    std::shared_ptr<DeviceBuffer> src;
    std::shared_ptr<DeviceBuffer> packed;  // 16-bit patterns of src (16-bit outputs)
    Event done = nullptr;                  // recorded after the copy (null: kept until finish())
  };
  // Drops the pending copies that have reached the host, freeing their device buffers: a
  // forward that nothing flushes (no hooks: bench_hip) would otherwise hold every captured
  // output on the device until finish().
  void reclaim_copies();
  friend class StageCall;  // the handlers' view of one stage

  const DevTensor& input(const std::string& key, const Tensor* host);
  DevTensor upload(const Tensor& host);
  // The model's weights on the device (hip/device_weights.h: one cache per model folder and
  // process, shared with every other hip backend on the same model).
  DeviceWeights& weights(const WeightStore& w);
  // A weight as float32 (f64 -> float as emu's to_float), rounded as a GEMM operand of `in`
  // (fp8: block-scaled).
  const float* weight(WeightStore& w, const std::string& name, arith::Fmt in) { return weights(w).f32(w, name, in, compute_); }
  // A GEMM's weight: on the matrix-core path its 16-bit patterns or release codes, else weight().
  GemmWeight gemm_weight(WeightStore& w, const std::string& name, const GemmSpec& spec) {
    return weights(w).gemm(w, name, spec, compute_);
  }
  // Whether every value of weight `name` is a bf16 number, so that an SGEMM of it may run on
  // the matrix cores (exact_sgemm).
  bool weight_is_bf16(WeightStore& w, const std::string& name) { return weights(w).holds_bf16(w, name, compute_); }
  const std::int64_t* table_i64(WeightStore& w, const std::string& name) { return weights(w).table_i64(w, name, compute_); }
  const float* rope_freq(const ModelConfig& c, bool compress);
  const std::int64_t* batch_span(const Batch& b, bool length);
  // A float32 output whose host copy its stage starts itself, a block of elements at a time
  // as it computes them (lm_head's logits: most of the copy then overlaps the product instead
  // of following it); publish() then only registers the output.
  struct EarlyCopy {
    Tensor host;  // float32, pinned
  };
  bool captures(const Stage& s) const { return !snapshot_ && (!capture_ || capture_(s)); }
  EarlyCopy early_copy_begin(const Shape& shape);
  // Copies elements [offset, offset + count) of d_src, once the compute stream has written them.
  void early_copy(EarlyCopy& c, const float* d_src, std::int64_t offset, std::int64_t count);
  Event next_event();
  Tensor publish(const Stage& s, std::size_t k, DevTensor t, const EarlyCopy* early = nullptr);
  // Registers output `key` on the device (its host copy, if any, already in t.host), and keeps
  // or compares it in the run snapshot: every output, host-computed ones included.
  void remember(const std::string& key, DevTensor t);
  void sync_all(const char* when);

  Policy policy_;
  std::uint64_t run_seed_;
  DeviceInfo info_;
  Stream compute_ = nullptr;
  // Two copy streams taken in turn: one packs an output's 16-bit patterns while the other's
  // copy runs, so the link is not idle between copies.
  Stream copy_[2] = {nullptr, nullptr};
  std::size_t copies_ = 0;
  DevicePool pool_;
  std::shared_ptr<PinnedPool> pinned_;
  std::unordered_map<std::string, DevTensor> dev_;
  std::map<std::string, KeptPartials> partials_;
  std::shared_ptr<DeviceWeights> weights_;
  const WeightStore* weights_of_ = nullptr;  // the store weights_ was looked up for
  std::map<int, DeviceBuffer> freq_;
  std::vector<std::int64_t> span_host_[2];
  DeviceBuffer span_dev_[2];
  std::vector<Pending> pending_;
  std::vector<Event> event_pool_;
  std::vector<Event> events_in_use_;
  std::vector<std::string> since_sync_;  // stages enqueued since the last sync (fault attribution)
  std::function<bool(const Stage&)> capture_;
  std::shared_ptr<RunSnapshot> snapshot_;
  bool snapshot_keep_ = false;
  Stream compare_ = nullptr;  // the snapshot's copies and comparisons (made with the first)
  bool timing_ = false, sync_each_ = false, matrix_cores_ = false;
  bool memlog_ = false;  // TDIFF_HIP_MEMLOG=1: the device memory after every stage, on stderr
  void log_memory(const std::string& stage) const;
  int logit_blocks_ = 4;
  int copy_streams_ = 2;
  std::size_t captured_bytes_ = 0;
  std::vector<std::pair<std::string, std::pair<Event, Event>>> timing_events_;
  struct TimedCopy {
    Event start, end;
    std::size_t bytes;
  };
  std::vector<TimedCopy> timed_copies_;
  void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream copy);
};

}  // namespace tdiff::hip
