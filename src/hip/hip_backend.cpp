#include "hip/hip_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "emu/norm.h"
#include "emu/numerics.h"
#include "emu/rope.h"
#include "hip/attention.h"
#include "hip/compressor.h"
#include "hip/elementwise.h"
#include "hip/mask.h"
#include "hip/gemm.h"
#include "hip/hyper_connection.h"
#include "hip/indexer.h"
#include "hip/moe.h"
#include "hip/norm.h"
#include "hip/rope.h"
#include "hip/topk.h"

namespace tdiff::hip {

using arith::Fmt;
using emu::fmt_of;

HipBackend::HipBackend(Policy policy, std::uint64_t run_seed)
    : policy_(std::move(policy)), run_seed_(run_seed), pinned_(std::make_shared<PinnedPool>()) {
  try {
    info_ = device_init();
    compute_ = stream_create();
    for (Stream& c : copy_) c = stream_create(true);  // their packing kernels go first: the link stays busy
  } catch (const DeviceError& e) {
    throw InputError(e.what());
  }
  const char* e = std::getenv("TDIFF_HIP_SYNC");
  sync_each_ = e && *e && std::string(e) != "0";
  matrix_cores_ = has_matrix_cores(info_.arch);  // set_matrix_cores(false): the vector ALU
}

HipBackend::~HipBackend() {
  try {
    device_sync();
  } catch (...) {  // a fault was reported (or will be) by finish(); nothing to do here
  }
  for (auto& [name, ev] : timing_events_) event_destroy(ev.first), event_destroy(ev.second);
  for (auto& c : timed_copies_) event_destroy(c.start), event_destroy(c.end);
  for (Event e : event_pool_) event_destroy(e);
  for (Event e : events_in_use_) event_destroy(e);
  pending_.clear();
  dev_.clear();
  stream_destroy(compute_);
  for (Stream c : copy_) stream_destroy(c);
}

// Waits for the compute and the copy stream; a kernel fault is reported with the stages that
// ran since the last sync (TDIFF_HIP_SYNC=1 syncs after every stage to pin it to one).
void HipBackend::sync_all(const char* when) {
  try {
    stream_sync(compute_);
    for (Stream c : copy_) stream_sync(c);
  } catch (const DeviceError& e) {
    std::string where = since_sync_.empty() ? std::string("no stage")
                        : since_sync_.size() == 1 ? "stage " + since_sync_.front()
                                                  : fmt::format("one of the stages {} .. {} (run with TDIFF_HIP_SYNC=1 to name it)",
                                                                since_sync_.front(), since_sync_.back());
    throw InputError(fmt::format("hip: {} in {} ({})", e.what(), where, when));
  }
  since_sync_.clear();
}

void HipBackend::finish() {
  sync_all("waiting for the host copies");
  pending_.clear();
  for (Event e : events_in_use_) event_pool_.push_back(e);
  events_in_use_.clear();
}

void HipBackend::release(const std::string& key) { dev_.erase(key); }

std::map<std::string, std::string> HipBackend::environment() const {
#if defined(TDIFF_HIP_NV)
  const char* platform = "CUDA (hip names mapped by src/hip/vendor.h)";
#else
  const char* platform = "HIP/ROCm";
#endif
  return {{"gpu", info_.name},
          {"gpu_arch", info_.arch},
          {"gpu_memory_bytes", std::to_string(info_.total_bytes)},
          {"gpu_driver", std::to_string(info_.driver)},
          {"gpu_runtime", std::to_string(info_.runtime)},
          {"gpu_platform", platform},
          {"gpu_wave_size", std::to_string(info_.wave_size)},
          {"gpu_gemm", matrix_cores_ ? "matrix cores for 16-bit operands (fp32 GEMMs of bf16 numbers, attention)" : "vector ALU (bit-identical to emu)"}};
}

std::vector<std::pair<std::string, double>> HipBackend::stage_ms() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, ev] : timing_events_) out.emplace_back(name, event_ms(ev.first, ev.second));
  return out;
}
std::vector<HipBackend::CopySpan> HipBackend::copy_spans() const {
  std::vector<CopySpan> out;
  if (timing_events_.empty()) return out;
  const Event origin = timing_events_.front().second.first;
  for (const auto& c : timed_copies_) out.push_back({event_ms(origin, c.start), event_ms(origin, c.end), c.bytes});
  return out;
}
double HipBackend::timed_forward_ms() const {
  return timing_events_.empty() ? 0.0 : event_ms(timing_events_.front().second.first, timing_events_.back().second.second);
}
void HipBackend::clear_timing() {
  for (auto& [name, ev] : timing_events_) event_destroy(ev.first), event_destroy(ev.second);
  timing_events_.clear();
  for (auto& c : timed_copies_) event_destroy(c.start), event_destroy(c.end);
  timed_copies_.clear();
}

void HipBackend::copy_to_host(void* dst, const void* src, std::size_t bytes, Stream copy) {
  if (!timing_) return copy_d2h(dst, src, bytes, copy);
  TimedCopy t{event_create(), event_create(), bytes};
  event_record(t.start, copy);
  copy_d2h(dst, src, bytes, copy);
  event_record(t.end, copy);
  timed_copies_.push_back(t);
}

HipBackend::DevTensor HipBackend::upload(const Tensor& host) {
  DevTensor d;
  d.shape = host.shape();
  d.host = host;
  const auto n = host.numel();
  switch (host.dtype()) {
    case DType::f64: {
      std::vector<float> v(static_cast<std::size_t>(n));
      const double* p = host.data<double>();
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(p[i]);
      d.buf = std::make_shared<DeviceBuffer>(v.size() * 4, &pool_);
      copy_h2d(d.buf->get(), v.data(), v.size() * 4, compute_);
      d.dtype = DType::f32;
      break;
    }
    case DType::f32:  // this backend's own float32 output, handed back (a bisect cache hit)
      d.buf = std::make_shared<DeviceBuffer>(host.nbytes(), &pool_);
      copy_h2d(d.buf->get(), host.raw(), host.nbytes(), compute_);
      d.dtype = DType::f32;
      break;
    case DType::bf16:  // this backend's own 16-bit output, handed back: widened exactly
    case DType::f16: {
      const Tensor wide = host.to(DType::f32);
      d.buf = std::make_shared<DeviceBuffer>(wide.nbytes(), &pool_);
      copy_h2d(d.buf->get(), wide.raw(), wide.nbytes(), compute_);
      stream_sync(compute_);  // wide is a temporary
      d.dtype = DType::f32;
      d.fmt = host.dtype() == DType::bf16 ? Fmt::bf16 : Fmt::f16;
      break;
    }
    case DType::i64:
      d.buf = std::make_shared<DeviceBuffer>(host.nbytes(), &pool_);
      copy_h2d(d.buf->get(), host.raw(), host.nbytes(), compute_);
      d.dtype = DType::i64;
      break;
    case DType::u8:
    case DType::boolean:
      d.buf = std::make_shared<DeviceBuffer>(host.nbytes(), &pool_);
      copy_h2d(d.buf->get(), host.raw(), host.nbytes(), compute_);
      d.dtype = DType::u8;
      break;
    default:
      throw std::logic_error(fmt::format("hip: cannot upload a {} tensor", dtype_name(host.dtype())));
  }
  return d;
}

const HipBackend::DevTensor& HipBackend::input(const std::string& key, const Tensor* host) {
  auto it = dev_.find(key);
  // The device copy is current when the host tensor is the one it mirrors (same storage, kept
  // alive by the entry, so no other tensor can reuse the address), or when this backend left
  // the host copy out (capture filter) and the executor hands back that undefined tensor.
  if (it != dev_.end() && (host->raw() == it->second.host.raw())) return it->second;
  if (!host->defined()) throw std::logic_error(fmt::format("hip: input {} has no data on the host or the device", key));
  return dev_[key] = upload(*host);
}

DeviceBuffer HipBackend::load_weight(WeightStore& w, const std::string& name, Fmt in, bool pooled) {
  // The stored tensor (F32 or BF16 from tdiff synth; f16/f64 also read) as float32, without
  // the float64 copy WeightStore::f64 would keep: float32 copied as it is, 16-bit patterns
  // copied and widened on the device (a v4 layer's 13 GB of bf16 experts in seconds), f64
  // converted on the host in chunks.
  const Tensor t = w.files().tensor(name);
  const std::int64_t n = t.numel(), cols = t.dim(-1), rows = n / cols;
  DeviceBuffer buf(static_cast<std::size_t>(n) * 4, pooled ? &pool_ : nullptr);
  if (t.dtype() == DType::f32) {
    copy_h2d(buf.get(), t.raw(), static_cast<std::size_t>(n) * 4, compute_);
  } else if (t.dtype() == DType::bf16 || t.dtype() == DType::f16) {
    const DeviceBuffer bits(static_cast<std::size_t>(n) * 2);
    copy_h2d(bits.get(), t.raw(), static_cast<std::size_t>(n) * 2, compute_);
    widen_bits16(bits.as<std::uint16_t>(), buf.as<float>(), n, t.dtype() == DType::bf16 ? Fmt::bf16 : Fmt::f16, compute_);
    stream_sync(compute_);  // bits is about to go
  } else {
    constexpr std::int64_t kChunk = std::int64_t{1} << 24;
    std::vector<float> v;
    for (std::int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const std::int64_t c1 = std::min(n, c0 + kChunk);
      v.resize(static_cast<std::size_t>(c1 - c0));
      for (std::int64_t i = c0; i < c1; ++i) v[static_cast<std::size_t>(i - c0)] = static_cast<float>(t.value(i));
      copy_h2d(buf.as<float>() + c0, v.data(), v.size() * 4, compute_);
    }
    stream_sync(compute_);  // v is about to go
  }
  quantize_weight(buf.as<float>(), rows, cols, in, compute_);
  return buf;
}

const float* HipBackend::weight(WeightStore& w, const std::string& name, Fmt in) {
  const auto key = std::make_pair(name, static_cast<int>(in));
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second.as<float>();
  return weights_.emplace(key, load_weight(w, name, in, true)).first->second.as<float>();
}

GemmWeight HipBackend::gemm_weight(WeightStore& w, const std::string& name, const GemmSpec& spec) {
  if (!runs_on_matrix_cores(spec)) return weight(w, name, spec.in);
  const auto key = std::make_pair(name, kBits16Key + static_cast<int>(spec.in));
  auto it = weights_.find(key);
  if (it == weights_.end()) {
    const Tensor t = w.files().tensor(name);
    const std::int64_t n = t.numel();
    DeviceBuffer b(static_cast<std::size_t>(n) * 2, &pool_);
    if (t.dtype() == DType::bf16 && spec.in == Fmt::bf16) {
      // A bf16 operand of a bf16 weight is the weight: its stored patterns, copied as they are.
      copy_h2d(b.get(), t.raw(), static_cast<std::size_t>(n) * 2, compute_);
    } else {
      DeviceBuffer f = load_weight(w, name, spec.in, false);  // freed, not kept in the pool
      pack_bits16(f.as<float>(), b.as<std::uint16_t>(), n, spec.in, compute_);
      stream_sync(compute_);  // before f is freed
    }
    it = weights_.emplace(key, std::move(b)).first;
  }
  return GemmWeight(it->second.as<std::uint16_t>());
}

bool HipBackend::weight_is_bf16(WeightStore& w, const std::string& name) {
  auto it = bf16_weight_.find(name);
  if (it != bf16_weight_.end()) return it->second;
  bool exact = w.files().info(name).dtype == DType::bf16;
  if (!exact) {  // float32 (or f64) files may still hold bf16 numbers, e.g. a converted checkpoint
    const DeviceBuffer f = load_weight(w, name, Fmt::f32, false);
    DeviceBuffer flag(sizeof(int), &pool_);
    memset_async(flag.get(), 0, sizeof(int), compute_);
    mark_inexact_operands(f.as<float>(), static_cast<std::int64_t>(f.bytes() / 4), Fmt::bf16, flag.as<int>(), compute_);
    int inexact = 1;
    copy_d2h(&inexact, flag.get(), sizeof(int), compute_);
    stream_sync(compute_);
    exact = inexact == 0;
  }
  return bf16_weight_[name] = exact;
}

const std::int64_t* HipBackend::table_i64(WeightStore& w, const std::string& name) {
  const auto key = std::make_pair(name, -1);
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second.as<std::int64_t>();
  const Tensor& t = w.i64(name);
  DeviceBuffer buf(static_cast<std::size_t>(std::max<std::int64_t>(t.numel(), 1)) * 8, &pool_);
  copy_h2d(buf.get(), t.raw(), t.nbytes(), compute_);
  stream_sync(compute_);  // t is WeightStore's; the copy must be done before it may be trimmed
  return weights_.emplace(key, std::move(buf)).first->second.as<std::int64_t>();
}

const float* HipBackend::rope_freq(const ModelConfig& c, bool compress) {
  auto it = freq_.find(compress);
  if (it != freq_.end()) return it->second.as<float>();
  const auto f = emu::rope_frequencies(compress ? c.rope_compress : c.rope_main, c.rope_dim);
  DeviceBuffer buf(f.size() * 4, &pool_);
  copy_h2d(buf.get(), f.data(), f.size() * 4, compute_);
  stream_sync(compute_);  // f is a temporary
  return freq_.emplace(compress, std::move(buf)).first->second.as<float>();
}

const std::int64_t* HipBackend::batch_span(const Batch& b, bool length) {
  const auto& v = length ? b.length : b.start;
  auto& host = span_host_[length];
  if (host != v || !span_dev_[length].get()) {
    host = v;
    span_dev_[length] = DeviceBuffer(v.size() * 8, &pool_);
    copy_h2d(span_dev_[length].get(), host.data(), v.size() * 8, compute_);
  }
  return span_dev_[length].as<std::int64_t>();
}

Event HipBackend::next_event() {
  Event e = event_pool_.empty() ? event_create() : event_pool_.back();
  if (!event_pool_.empty()) event_pool_.pop_back();
  events_in_use_.push_back(e);
  return e;
}

HipBackend::EarlyCopy HipBackend::early_copy_begin(const Shape& shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * 4;
  auto mem = pinned_->get(bytes);
  return {Tensor::view(DType::f32, shape, mem.get(), mem)};
}

void HipBackend::early_copy(EarlyCopy& c, const float* d_src, std::int64_t offset, std::int64_t count) {
  const Event ready = next_event();
  event_record(ready, compute_);
  Stream copy = copy_[copies_++ % copy_streams_];
  stream_wait(copy, ready);
  copy_to_host(reinterpret_cast<float*>(c.host.raw()) + offset, d_src + offset, static_cast<std::size_t>(count) * 4, copy);
}

// Registers an output on the device and starts its host copy (float64 for float tensors).
Tensor HipBackend::publish(const Stage& s, std::size_t k, DevTensor t, const EarlyCopy* early) {
  const std::string key = s.name + "/" + s.outputs[k];
  Tensor host;
  if (early) {  // copied already, block by block
    captured_bytes_ += early->host.nbytes();
    pending_.push_back({t.buf, nullptr});
    host = early->host;
  } else if (captures(s)) {
    const Event ready = next_event();
    event_record(ready, compute_);
    Stream copy = copy_[copies_++ % copy_streams_];
    stream_wait(copy, ready);
    const std::int64_t n = t.numel();
    Pending p{t.buf, nullptr};
    if (t.dtype == DType::f32 && (t.fmt == Fmt::bf16 || t.fmt == Fmt::f16)) {
      // 16-bit numbers held in float32: their bit patterns (packed on the copy stream) are
      // copied, half the bytes; readers widen them exactly.
      const std::size_t bytes = static_cast<std::size_t>(n) * 2;
      captured_bytes_ += bytes;
      p.packed = std::make_shared<DeviceBuffer>(std::max<std::size_t>(bytes, 2), &pool_);
      pack_bits16(t.f(), p.packed->as<std::uint16_t>(), n, t.fmt, copy);
      auto mem = pinned_->get(bytes);
      host = Tensor::view(t.fmt == Fmt::bf16 ? DType::bf16 : DType::f16, t.shape, mem.get(), mem);
      copy_to_host(mem.get(), p.packed->get(), bytes, copy);
    } else if (t.dtype == DType::f32) {
      // Float32 numbers (rounded to their format on the device): copied as they are, half the
      // bytes of float64; readers that need float64 (refcpu in a mixed run) widen them exactly.
      const std::size_t bytes = static_cast<std::size_t>(n) * 4;
      captured_bytes_ += bytes;
      auto mem = pinned_->get(bytes);
      host = Tensor::view(DType::f32, t.shape, mem.get(), mem);
      copy_to_host(mem.get(), t.buf->get(), bytes, copy);
    } else {
      const DType dt = t.dtype == DType::i64 ? DType::i64 : DType::boolean;
      const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(dt);
      captured_bytes_ += bytes;
      auto mem = pinned_->get(bytes);
      host = Tensor::view(dt, t.shape, mem.get(), mem);
      copy_to_host(mem.get(), t.buf->get(), bytes, copy);
    }
    pending_.push_back(std::move(p));
  }
  t.host = host;
  dev_[key] = std::move(t);
  return host;
}

// One stage's inputs, outputs and scratch.
class HipBackend::StageRun {
 public:
  StageRun(HipBackend& be, const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx)
      : be(be), s(s), in(in), ctx(ctx), num(be.policy_.resolve(s.name)) {}
  const DevTensor& dev(std::size_t i) { return be.input(s.inputs.at(i).key(), in.at(i)); }
  // Input i as float values in format f (emu's load(in, f)): the device copy itself when its
  // values already are in f, else a rounded scratch copy.
  const float* f(std::size_t i, Fmt fmt) {
    const DevTensor& d = dev(i);
    if (d.dtype != DType::f32) throw std::logic_error(fmt::format("hip: stage {}: input {} is not a float tensor", s.name, i));
    if (fmt == Fmt::f32 || d.fmt == fmt) return d.f();
    float* out = scratch(d.numel());
    round_to(d.f(), d.numel(), fmt, out, be.compute_);
    return out;
  }
  const float* exact(std::size_t i) { return f(i, Fmt::f32); }
  const std::int64_t* i64(std::size_t i) { return dev(i).i64(); }
  const std::uint8_t* u8(std::size_t i) { return dev(i).u8(); }
  const Shape& shape(std::size_t i) { return dev(i).shape; }
  float* scratch(std::int64_t n) {
    scratch_.push_back(std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4, &be.pool_));
    return scratch_.back()->as<float>();
  }
  template <class T> T* scratch_of(std::int64_t n) {
    scratch_.push_back(std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T), &be.pool_));
    return scratch_.back()->as<T>();
  }
  DevTensor out(Shape shape, Fmt fmt, DType dtype = DType::f32) {
    DevTensor d;
    d.shape = std::move(shape);
    d.dtype = dtype;
    d.fmt = fmt;
    d.buf = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(std::max<std::int64_t>(d.numel(), 1)) * dtype_size(dtype), &be.pool_);
    return d;
  }
  const float* weight(std::size_t i, Fmt fmt = Fmt::f32) { return be.weight(ctx.weights, s.weights.at(i), fmt); }
  // Weight i as the operand of a GEMM under `spec` (16-bit patterns on the matrix-core path).
  GemmWeight gemm_weight(std::size_t i, const GemmSpec& spec) { return be.gemm_weight(ctx.weights, s.weights.at(i), spec); }

  HipBackend& be;
  const Stage& s;
  const std::vector<const Tensor*>& in;
  RunContext& ctx;
  const Numerics num;

 private:
  std::vector<std::shared_ptr<DeviceBuffer>> scratch_;
};

std::vector<Tensor> HipBackend::run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) {
  since_sync_.push_back(s.name);
  Event t0 = nullptr, t1 = nullptr;
  if (timing_) {
    t0 = event_create(), t1 = event_create();
    event_record(t0, compute_);
  }
  std::vector<Tensor> out;
  try {
    StageRun r(*this, s, in, ctx);
    out = run_stage(r);
  } catch (const DeviceOutOfMemory& e) {
    throw InputError(fmt::format("hip: stage {}: {}", s.name, e.what()));
  } catch (const DeviceError& e) {
    throw InputError(fmt::format("hip: stage {}: {}", s.name, e.what()));
  } catch (const InputError&) {
    throw;
  } catch (const std::logic_error&) {
    throw;
  } catch (const std::runtime_error& e) {  // launch failures from the kernel launchers
    throw InputError(fmt::format("hip: stage {}: kernel launch failed: {}", s.name, e.what()));
  }
  if (timing_) {
    event_record(t1, compute_);
    timing_events_.push_back({s.name, {t0, t1}});
  }
  if (sync_each_) sync_all("after the stage");
  return out;
}

std::vector<Tensor> HipBackend::run_stage(StageRun& r) {
  const Stage& s = r.s;
  const ModelConfig& c = r.ctx.config;
  const Batch& batch = r.ctx.batch;
  const Numerics& num = r.num;
  const Fmt st = fmt_of(num.storage), sf = fmt_of(num.stream), mi = fmt_of(num.matmul_input);
  const bool atomic = num.reduction == Reduction::atomic;
  const std::uint64_t seed = emu::stage_hash(s.name, run_seed_);
  const std::int64_t B = batch.rows(), S = batch.seq(), N = B * S;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Stream cs = compute_;
  auto spec_out = [&](Fmt out) { return GemmSpec{mi, fmt_of(num.matmul_accum), out, atomic, matrix_cores_}; };
  // x [rows, K] in storage -> the GEMM operand under `spec`: rounded to spec.in (fp8: 1x128
  // groups within `segment`), as 16-bit patterns where the product runs on the matrix cores.
  auto operand = [&](const float* x, std::int64_t rows, std::int64_t K, const GemmSpec& spec,
                     std::int64_t segment = 0) -> GemmInput {
    if (runs_on_matrix_cores(spec)) {
      auto* q = r.scratch_of<std::uint16_t>(rows * K);
      quantize_activations_bits16(x, q, rows * K, spec.in, cs);
      return GemmInput(q);
    }
    if (spec.in == Fmt::f32) return x;
    float* q = r.scratch(rows * K);
    quantize_activations(x, q, rows, K, segment, spec.in, cs);
    return q;
  };
  // An SGEMM (float32 operands and accumulator) of bf16 activations and a weight of bf16
  // numbers sums the same exact products as the bf16 matrix-core GEMM with a float32
  // accumulator, so it runs there (fixed's lm_head and router on a bf16 checkpoint); only the
  // float32 summation order differs, as on every matrix-core GEMM.
  auto exact_sgemm = [&](GemmSpec spec, Fmt x_fmt, std::size_t weight) {
    if (spec.in == Fmt::f32 && spec.acc == Fmt::f32 && spec.matrix_cores && !spec.atomic && x_fmt == Fmt::bf16 &&
        weight_is_bf16(r.ctx.weights, s.weights.at(weight)))
      spec.in = Fmt::bf16;
    return spec;
  };
  auto rows_of = [](const Shape& sh) { return shape_numel(sh) / sh.back(); };
  std::vector<Tensor> outs;
  auto emit = [&](DevTensor t) { outs.push_back(publish(s, outs.size(), std::move(t))); };
  // Stages computed on the host from integer inputs (as emu, which calls refcpu for them):
  // integer inputs read back from the device, float inputs passed as zero tensors of their
  // shape (these stages read only their shapes).
  auto on_host = [&]() {
    std::vector<Tensor> h;
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      const DevTensor& d = r.dev(i);
      if (d.dtype == DType::f32) {
        h.emplace_back(DType::f64, d.shape);
        continue;
      }
      Tensor t(d.dtype == DType::i64 ? DType::i64 : DType::boolean, d.shape);
      copy_d2h(t.raw(), d.buf->get(), t.nbytes(), cs);
      h.push_back(std::move(t));
    }
    stream_sync(cs);
    std::vector<const Tensor*> ptrs;
    for (auto& t : h) ptrs.push_back(&t);
    auto res = exact_.run(s, ptrs, r.ctx);
    for (std::size_t k = 0; k < res.size(); ++k) {
      DevTensor d = upload(res[k]);
      dev_[s.name + "/" + s.outputs[k]] = std::move(d);  // d.host = res[k]: no copy back needed
      outs.push_back(res[k]);
    }
  };

  switch (s.kind) {
    case OpKind::window_mask: {
      auto win = r.out({B, S, S}, Fmt::f32, DType::u8);
      window_mask(r.u8(0), B, S, c.sliding_window, win.u8(), cs);
      emit(std::move(win));
      break;
    }
    case OpKind::cmp_mask:
      on_host();
      break;
    case OpKind::embed: {
      const auto D = c.hidden_size;
      auto e = r.out({B, S, D}, st);
      embed(r.i64(0), N, r.weight(0), D, st, e.f(), cs);
      emit(std::move(e));
      break;
    }
    case OpKind::hc_expand: {
      const auto D = c.hidden_size, n = c.hc_mult;
      auto X = r.out({B, S, n, D}, sf);
      hc_expand(r.exact(0), N, n, D, st, sf, X.f(), cs);
      emit(std::move(X));
      break;
    }
    case OpKind::rope_table: {
      const auto half = c.rope_dim / 2;
      auto cs_t = r.out({B, S, half}, Fmt::f32), sn_t = r.out({B, S, half}, Fmt::f32);
      rope_tables(r.i64(0), N, rope_freq(c, s.compress_rope), half, num.rope_angle, cs_t.f(), sn_t.f(), cs);
      emit(std::move(cs_t));
      emit(std::move(sn_t));
      break;
    }
    case OpKind::hc_mix: {
      const auto M = c.hc_mix_width(), flat = c.hc_mult * c.hidden_size;
      auto mix = r.out({B, S, M}, Fmt::f32);
      hc_mix(r.f(0, sf), N, flat, r.weight(0), M, eps, num, mix.f(), cs);
      emit(std::move(mix));
      break;
    }
    case OpKind::hc_sinkhorn: {
      const auto n = c.hc_mult;
      auto pre = r.out({B, S, n}, Fmt::f32), post = r.out({B, S, n}, Fmt::f32), comb = r.out({B, S, n, n}, Fmt::f32);
      hc_sinkhorn(r.exact(0), N, n, r.weight(0), r.weight(1), static_cast<float>(c.hc_eps), c.hc_sinkhorn_iters, num,
                  pre.f(), post.f(), comb.f(), cs);
      emit(std::move(pre));
      emit(std::move(post));
      emit(std::move(comb));
      break;
    }
    case OpKind::hc_pre: {
      // The collapse is cast to the stream dtype (spec §3.7), as emu.
      auto x = r.out({B, S, c.hidden_size}, sf);
      hc_pre(r.f(0, sf), r.exact(1), N, c.hc_mult, c.hidden_size, sf, x.f(), cs);
      emit(std::move(x));
      break;
    }
    case OpKind::rms_norm:
    case OpKind::head_rms_norm: {
      const Shape sh = r.shape(0);
      auto y = r.out(sh, st);
      rms_norm(r.f(0, s.stream_input ? sf : st), rows_of(sh), sh.back(), s.kind == OpKind::rms_norm ? r.weight(0) : nullptr, eps,
               fmt_of(num.norm_stats), st, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::linear:
    case OpKind::lm_head: {
      const Shape sh = r.shape(0);
      const auto K = sh.back(), rows = rows_of(sh);
      const auto& info = r.ctx.weights.files().info(s.weights[0]);
      const auto O = info.shape.at(0);
      GemmSpec spec = spec_out(st);
      if (s.kind == OpKind::lm_head) {  // the logits knob sets the whole GEMM
        const Fmt lf = fmt_of(num.logits);
        spec.in = lf == Fmt::f16 ? Fmt::f16 : lf == Fmt::bf16 ? Fmt::bf16 : Fmt::f32;
        spec.acc = lf == Fmt::f16 ? Fmt::f16 : Fmt::f32;
        spec.out = lf;
      }
      spec = exact_sgemm(spec, st, 0);
      Shape osh = sh;
      osh.back() = O;
      if (s.width > 0) osh.back() = O / s.width, osh.push_back(s.width);
      auto y = r.out(osh, spec.out);
      const GemmInput x = operand(r.f(0, st), rows, K, spec);
      const GemmWeight w = r.gemm_weight(0, spec);
      if (s.kind == OpKind::lm_head && spec.out == Fmt::f32 && rows >= logit_blocks_ && logit_blocks_ > 1 && captures(s)) {
        // Captured float32 logits (0.5 GB at v4's vocabulary and 1024 tokens, 10 ms of the
        // link) go to the host in row blocks, each copied while the next is computed (each
        // output the same sum in the same order: the same bits as one GEMM).
        EarlyCopy early = early_copy_begin(osh);
        const std::int64_t block = (rows + logit_blocks_ - 1) / logit_blocks_;
        for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
          const std::int64_t n = std::min(block, rows - r0);
          gemm(x.rows_from(r0, K), K, w, y.f() + r0 * O, O, n, K, O, spec, cs);
          early_copy(early, y.f(), r0 * O, n * O);
        }
        outs.push_back(publish(s, outs.size(), std::move(y), &early));
        break;
      }
      gemm(x, K, w, y.f(), O, rows, K, O, spec, cs);
      emit(std::move(y));
      break;
    }
    case OpKind::rope:
    case OpKind::rope_inverse: {
      const Shape sh = r.shape(0);
      const std::int64_t rows = rows_of(sh), per_token = rows / N;
      auto y = r.out(sh, st);
      rope_rotate(r.f(0, st), rows, sh.back(), c.rope_dim, r.exact(1), r.exact(2), per_token, N,
                  s.kind == OpKind::rope_inverse, st, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::entry_rope: {
      const Shape sh = r.shape(0);
      const auto n = sh.at(1), half = c.rope_dim / 2;
      std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
      for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = w * s.rate;
      auto* d_pos = r.scratch_of<std::int64_t>(n);
      copy_h2d(d_pos, positions.data(), positions.size() * 8, cs);
      float* cos_t = r.scratch(n * half);
      float* sin_t = r.scratch(n * half);
      rope_tables(d_pos, n, rope_freq(c, true), half, num.rope_angle, cos_t, sin_t, cs);
      auto y = r.out(sh, st);
      rope_rotate(r.f(0, st), B * n, sh.back(), c.rope_dim, cos_t, sin_t, 1, n, false, st, y.f(), cs);
      stream_sync(cs);  // positions is a temporary
      emit(std::move(y));
      break;
    }
    case OpKind::cmp_proj: {
      const auto K = c.hidden_size;
      const GemmInput x = operand(r.f(0, st), N, K, spec_out(st));
      for (std::size_t i = 0; i < 2; ++i) {
        const auto O = r.ctx.weights.files().info(s.weights[i]).shape.at(0);
        auto y = r.out({B, S, O}, st);
        gemm(x, K, r.gemm_weight(i, spec_out(st)), y.f(), O, N, K, O, spec_out(st), cs);
        emit(std::move(y));
      }
      break;
    }
    case OpKind::pool: {
      const auto n = S / s.rate;
      auto y = r.out({B, n, s.width}, st);
      gated_pool(r.f(0, st), r.f(1, st), B, S, batch_span(batch, false), batch_span(batch, true), r.weight(0), s.rate,
                 s.width, s.overlap, num, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::idx_weights: {
      const auto HI = r.ctx.weights.files().info(s.weights[0]).shape.at(0), K = c.hidden_size;
      float* tmp = r.scratch(N * HI);
      gemm(operand(r.f(0, st), N, K, spec_out(Fmt::f32)), K, r.gemm_weight(0, spec_out(Fmt::f32)), tmp, HI, N, K, HI, spec_out(Fmt::f32), cs);
      const Fmt f = fmt_of(num.index_score);
      auto y = r.out({B, S, HI}, f);
      scale_round(tmp, N * HI, 1.0f / std::sqrt(static_cast<float>(HI)), f, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::idx_score: {
      const Shape qs = r.shape(0);
      const auto n = r.shape(1).at(1), HI = qs.at(2), dI = qs.at(3);
      auto y = r.out({B, S, n}, Fmt::f32);
      idx_score(r.f(0, st), r.f(1, st), r.f(2, fmt_of(num.index_score)), r.i64(3), batch_span(batch, true), B, S, n, HI,
                dI, s.rate, num, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::idx_topk: {
      const auto n = r.shape(0).at(2), k = std::min(c.index_topk, n);
      auto sel = r.out({B, S, k}, Fmt::f32, DType::i64);
      idx_topk(r.exact(0), r.i64(1), batch_span(batch, true), B, S, n, k, s.rate,
               TopkSpec{fmt_of(num.topk_compare), num.topk_ties, seed}, sel.i64(), cs);
      emit(std::move(sel));
      break;
    }
    case OpKind::attention: {
      const auto H = c.num_attention_heads, d = c.head_dim;
      const bool compressed = r.in.size() > 3;
      const auto n = compressed ? r.shape(3).at(1) : 0;
      auto o = r.out({B, S, H, d}, st);
      const float* kv = r.f(1, st);
      const float* C = compressed ? r.f(3, st) : nullptr;
      // On the matrix cores the keys (= values) are read as 16-bit operand patterns.
      std::uint16_t *kv16 = nullptr, *C16 = nullptr;
      if (attention_on_matrix_cores(num, matrix_cores_)) {
        kv16 = r.scratch_of<std::uint16_t>(B * S * d);
        quantize_activations_bits16(kv, kv16, B * S * d, st, cs);
        if (n > 0) {
          C16 = r.scratch_of<std::uint16_t>(B * n * d);
          quantize_activations_bits16(C, C16, B * n * d, st, cs);
        }
      }
      attention(r.f(0, st), kv, r.u8(2), C, compressed ? r.u8(4) : nullptr, B, S, n, H, d, r.weight(0), num, o.f(), cs,
                kv16, C16);
      emit(std::move(o));
      break;
    }
    case OpKind::grouped_linear: {
      const auto G = c.o_groups, Ro = c.o_lora_rank, per = c.num_attention_heads * c.head_dim / G;
      const GemmInput x = operand(r.f(0, st), N, G * per, spec_out(st), per);
      auto y = r.out({B, S, G * Ro}, st);
      GemmGroups groups;
      groups.count = G, groups.x_stride = per, groups.w_stride = Ro * per, groups.y_stride = Ro, groups.y_rows = N;
      gemm(x, G * per, r.gemm_weight(0, spec_out(st)), y.f(), G * Ro, N, per, Ro, spec_out(st), cs, groups);
      emit(std::move(y));
      break;
    }
    case OpKind::hc_post: {
      const Shape sh = r.shape(0);
      auto X = r.out(sh, sf);
      hc_post(r.f(0, sf), r.f(1, st), r.exact(2), r.exact(3), N, c.hc_mult, c.hidden_size, sf, X.f(), cs);
      emit(std::move(X));
      break;
    }
    case OpKind::router: {
      // fp32: an SGEMM on the stored z; 16-bit: operands, logits and scores in that format.
      const auto E = r.ctx.weights.files().info(s.weights[0]).shape.at(0), D = c.hidden_size;
      const Fmt rf = fmt_of(num.router);
      const GemmSpec spec = exact_sgemm({rf, rf == Fmt::f32 ? Fmt::f32 : fmt_of(num.matmul_accum), rf, atomic, matrix_cores_}, st, 0);
      auto logit = r.out({N, E}, rf), score = r.out({N, E}, rf);
      gemm(operand(r.f(0, st), N, D, spec), D, r.gemm_weight(0, spec), logit.f(), E, N, D, E, spec, cs);
      router_scores(logit.f(), N * E, rf, score.f(), cs);
      emit(std::move(logit));
      emit(std::move(score));
      break;
    }
    case OpKind::moe_select: {
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      auto idx = r.out({N, K}, Fmt::f32, DType::i64);
      if (r.in.size() > 1) {  // hash routing: a table lookup of the token ids
        const auto& info = r.ctx.weights.files().info(s.weights.at(0));
        hash_route(r.i64(1), table_i64(r.ctx.weights, s.weights.at(0)), N, info.shape.at(0), K, idx.i64(), cs);
        emit(std::move(idx));
        break;
      }
      topk_rows(r.exact(0), N, E, K, r.weight(0), TopkSpec{fmt_of(num.topk_compare), num.topk_ties, seed}, idx.i64(), cs);
      emit(std::move(idx));
      break;
    }
    case OpKind::moe_weights: {
      const auto K = c.num_experts_per_tok, E = c.n_routed_experts;
      const float* bias = nullptr;
      if (num.routing_bias_in_weights) {
        const std::string name = fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", s.layer);
        if (r.ctx.weights.files().has(name)) bias = weight(r.ctx.weights, name, Fmt::f32);
      }
      auto wt = r.out({N, K}, Fmt::f32);
      moe_weights(r.exact(0), r.i64(1), bias, N, E, K, num.routing_norm_eps, static_cast<float>(c.routed_scaling_factor),
                  wt.f(), cs);
      emit(std::move(wt));
      break;
    }
    case OpKind::moe_experts:
    case OpKind::moe_shared: {
      const auto D = c.hidden_size, I = c.moe_intermediate_size;
      const bool routed = s.kind == OpKind::moe_experts;
      const auto K = routed ? c.num_experts_per_tok : 1;
      const bool clip = routed || num.shared_clip;
      const float limit = static_cast<float>(c.swiglu_limit);
      const GemmSpec gu_spec = spec_out(Fmt::f32), down_spec = spec_out(st);
      const GemmInput z = operand(r.f(0, st), N, D, gu_spec);
      auto y = r.out({N, D}, st);
      if (!routed) {
        float* gu = r.scratch(N * 2 * I);
        float* h = r.scratch(N * I);
        // gate and up side by side in one [N, 2I] buffer (zeroed once for atomic split-K)
        GemmGroups side;
        side.zero_output = false;
        if (atomic) memset_async(gu, 0, static_cast<std::size_t>(N * 2 * I) * 4, cs);
        gemm(z, D, r.gemm_weight(0, gu_spec), gu, 2 * I, N, D, I, gu_spec, cs, side);
        gemm(z, D, r.gemm_weight(1, gu_spec), gu + I, 2 * I, N, D, I, gu_spec, cs, side);
        swiglu(gu, N, I, clip, limit, st, h, cs);
        gemm(operand(h, N, I, down_spec), I, r.gemm_weight(2, down_spec), y.f(), D, N, I, D, down_spec, cs);
        emit(std::move(y));
        break;
      }
      // Grouped GEMM: slots t·K+k gathered per expert; gate|up in one GEMM per expert.
      const auto E = c.n_routed_experts, NK = N * K;
      auto* starts = r.scratch_of<std::int32_t>(E + 1);
      auto* rows = r.scratch_of<std::int32_t>(NK);
      expert_rows(r.i64(1), NK, E, starts, rows, cs);
      std::vector<std::int32_t> h_starts(static_cast<std::size_t>(E + 1));
      copy_d2h(h_starts.data(), starts, h_starts.size() * 4, cs);
      stream_sync(cs);  // the largest group bounds the grid
      std::int64_t max_rows = 0;
      for (std::int64_t e = 0; e < E; ++e)
        max_rows = std::max<std::int64_t>(max_rows, h_starts[static_cast<std::size_t>(e + 1)] - h_starts[static_cast<std::size_t>(e)]);
      float* gu = r.scratch(NK * 2 * I);
      float* h = r.scratch(NK * I);
      float* slot = r.scratch(NK * D);
      GemmGroups g1;
      g1.count = E, g1.w_stride = 2 * I * D, g1.d_rows = rows, g1.d_starts = starts, g1.a_div = static_cast<std::int32_t>(K);
      g1.y_rows = NK;
      gemm(z, D, r.gemm_weight(0, gu_spec), gu, 2 * I, max_rows, D, 2 * I, gu_spec, cs, g1);
      swiglu(gu, NK, I, clip, limit, st, h, cs);
      GemmGroups g2 = g1;
      g2.w_stride = D * I, g2.a_div = 1;
      gemm(operand(h, NK, I, down_spec), I, r.gemm_weight(1, down_spec), slot, D, max_rows, I, D, down_spec, cs, g2);
      combine(slot, r.exact(2), N, K, D, atomic, st, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::add: {
      const Shape sh = r.shape(2);
      auto y = r.out(sh, st);
      add(r.f(0, st), r.f(1, st), shape_numel(sh), st, y.f(), cs);
      emit(std::move(y));
      break;
    }
    case OpKind::hc_head: {
      const auto n = c.hc_mult, D = c.hidden_size;
      auto y = r.out({B, S, D}, sf), preh = r.out({B, S, n}, Fmt::f32);
      hc_head(r.f(0, sf), N, n, D, r.weight(0), r.weight(1), r.weight(2), eps, static_cast<float>(c.hc_eps), num, sf,
              y.f(), preh.f(), cs);
      emit(std::move(y));
      emit(std::move(preh));
      break;
    }
  }
  if (outs.size() != s.outputs.size())
    throw std::logic_error(fmt::format("hip: no implementation for stage {} ({})", s.name, op_kind_name(s.kind)));
  return outs;
}

}  // namespace tdiff::hip
