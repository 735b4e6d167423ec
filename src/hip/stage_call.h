#pragma once
// What a hip handler gets for one stage (backend/handler_table.h): the stage, its inputs as
// device tensors, scratch and outputs on the backend's pool, the stage's resolved numerics
// and the backend's caches. Handlers live in the family files' host part (attention.cpp
// beside attention.hip, moe.cpp beside moe.hip, ...), each registering its kinds with
// register_<family>(); hip_backend.cpp builds the table from them. The knob -> kernel spec
// mapping is emu's (emu/<family>.h), so both backends read a knob the same way.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/handler_table.h"
#include "emu/gemm.h"
#include "emu/stage_facts.h"
#include "hip/hip_backend.h"

namespace tdiff::hip {

class StageCall : public emu::StageFacts {
 public:
  using DevTensor = HipBackend::DevTensor;
  StageCall(HipBackend& be, const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx);

  const DevTensor& dev(std::size_t i) { return be.input(s.inputs.at(i).key(), in.at(i)); }
  // Input i as float values in format f (emu's load(in, f)): the device copy itself when its
  // values already are in f, else a rounded scratch copy.
  const float* load(std::size_t i, arith::Fmt fmt);
  const float* load_f32(std::size_t i) { return load(i, arith::Fmt::f32); }
  const std::int64_t* i64(std::size_t i) { return dev(i).i64(); }
  const std::uint8_t* u8(std::size_t i) { return dev(i).u8(); }
  const Shape& shape(std::size_t i) { return dev(i).shape; }
  float* scratch(std::int64_t n) { return scratch_of<float>(n); }
  template <class T>
  T* scratch_of(std::int64_t n) {
    scratch_.push_back(std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T), &be.pool_));
    return scratch_.back()->as<T>();
  }
  DevTensor out(Shape shape, arith::Fmt fmt, DType dtype = DType::f32);
  // Weight i (or a named weight) as float32 rounded as a GEMM operand of `fmt`.
  const float* weight(std::size_t i, arith::Fmt fmt = arith::Fmt::f32) { return weight(s.weights.at(i), fmt); }
  const float* weight(const std::string& name, arith::Fmt fmt) { return be.weight(ctx.weights, name, fmt); }
  // Weight i as the operand of a GEMM under `spec` (16-bit patterns on the matrix-core path).
  GemmWeight gemm_weight(std::size_t i, const GemmSpec& spec) { return be.gemm_weight(ctx.weights, s.weights.at(i), spec); }
  // The leading dimension of weight i (from the file's header: no host copy).
  std::int64_t weight_rows(std::size_t i) const { return ctx.weights.shape(s.weights.at(i)).at(0); }

  // emu's GEMM spec on this device (matrix cores where it has them and the spec allows).
  GemmSpec device_spec(const emu::GemmSpec& spec) const;
  // An SGEMM (float32 operands and accumulator) of bf16 activations and a weight of bf16
  // numbers sums the same exact products as the bf16 matrix-core GEMM with a float32
  // accumulator, so it runs there (fixed's lm_head and router on a bf16 checkpoint); only the
  // float32 summation order differs, as on every matrix-core GEMM.
  GemmSpec exact_sgemm(GemmSpec spec, arith::Fmt x_fmt, std::size_t weight);
  // x [rows, K] in storage -> the GEMM operand under `spec`: rounded to spec.in (fp8: 1x128
  // groups within `segment`), as 16-bit patterns where the product runs on the matrix cores.
  GemmInput operand(const float* x, std::int64_t rows, std::int64_t K, const GemmSpec& spec, std::int64_t segment = 0);

  // The next output: registered on the device, its host copy started.
  void emit(DevTensor t);
  // Whether the stage's outputs are copied to the host (the capture filter).
  bool captures() const { return be.captures(s); }
  // A float32 output whose host copy the handler starts itself, a block at a time
  // (HipBackend::EarlyCopy); emit_copied() then registers it.
  HipBackend::EarlyCopy early_copy_begin(const Shape& shape) { return be.early_copy_begin(shape); }
  void early_copy(HipBackend::EarlyCopy& c, const float* d_src, std::int64_t offset, std::int64_t count) {
    be.early_copy(c, d_src, offset, count);
  }
  void emit_copied(DevTensor t, const HipBackend::EarlyCopy& early);
  int logit_blocks() const { return be.logit_blocks_; }
  // The outputs emitted so far (the handler's result).
  std::vector<Tensor> outputs() { return std::move(outs_); }

  // A tensor-parallel split simulated on this device (hip/collective.h): a buffer for the
  // ranks' partials [ranks, n], and their all-reduce in the split's order into d_out.
  std::shared_ptr<DeviceBuffer> rank_partials(int ranks, std::int64_t n);
  void all_reduce(const float* d_partials, int ranks, std::int64_t n, float* d_out);
  // A MoE branch's rank partials (emu's keep_or_reduce): reduced now (moe_reduce=reduce_each)
  // and emitted, or kept on the device for moe.out and emitted as their float64 sum, the
  // branch's value before any reduction (sum_then_reduce).
  void keep_or_reduce(std::shared_ptr<DeviceBuffer> partials, int ranks, Shape shape);
  // The partials kept for input i when it still is the sum they were emitted as (this run's
  // own output, not one fed from the reference); nullopt otherwise.
  std::optional<HipBackend::KeptPartials> take_partials(std::size_t i);

  const float* rope_freq(bool compress) { return be.rope_freq(c, compress); }
  const std::int64_t* batch_span(bool length) { return be.batch_span(batch, length); }
  const std::int64_t* table_i64(const std::string& name) { return be.table_i64(ctx.weights, name); }
  bool matrix_cores() const { return be.matrix_cores_; }

  HipBackend& be;
  const hipStream_t cs;  // the compute stream

 private:
  std::vector<std::shared_ptr<DeviceBuffer>> scratch_;
  std::vector<Tensor> outs_;
};

using Handlers = HandlerTable<StageCall>;

inline std::int64_t rows_of(const Shape& sh) { return shape_numel(sh) / sh.back(); }

// One per operator family (the family names of the operator table).
void register_embedding(Handlers& h);
void register_hyper_connection(Handlers& h);
void register_rope(Handlers& h);
void register_mask(Handlers& h);
void register_norm(Handlers& h);
void register_linear(Handlers& h);
void register_compressor(Handlers& h);
void register_indexer(Handlers& h);
void register_attention(Handlers& h);
void register_moe(Handlers& h);

}  // namespace tdiff::hip
