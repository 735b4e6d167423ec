#include "hip/hip_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "emu/rope.h"
#include "hip/gemm.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

using arith::Fmt;

namespace {

const Handlers& handlers() {
  static const Handlers table = build_handler_table<StageCall>(
      "hip", {register_embedding, register_hyper_connection, register_rope, register_mask, register_norm,
              register_linear, register_compressor, register_indexer, register_attention, register_moe});
  return table;
}

}  // namespace

bool HipBackend::implements(OpKind kind) const { return handlers().has(kind); }

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
  return {{"gpu", info_.name},
          {"gpu_arch", info_.arch},
          {"gpu_memory_bytes", std::to_string(info_.total_bytes)},
          {"gpu_driver", std::to_string(info_.driver)},
          {"gpu_runtime", std::to_string(info_.runtime)},
          {"gpu_platform", vendor::kPlatform},
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
  // converted on the host in chunks. Release FP8/FP4 weights come dequantised through f64()
  // (exact in float32: a 4-bit significand times a power of two).
  const Tensor stored = w.stored(name);
  const Tensor t = stored.defined() ? stored : w.f64(name);
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
    const Tensor t = w.stored(name);
    const std::int64_t n = shape_numel(w.shape(name));
    DeviceBuffer b(static_cast<std::size_t>(n) * 2, &pool_);
    if (t.defined() && t.dtype() == DType::bf16 && spec.in == Fmt::bf16) {
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
  const Tensor t = w.stored(name);
  bool exact = t.defined() && t.dtype() == DType::bf16;
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

std::vector<Tensor> HipBackend::run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) {
  since_sync_.push_back(s.name);
  Event t0 = nullptr, t1 = nullptr;
  if (timing_) {
    t0 = event_create(), t1 = event_create();
    event_record(t0, compute_);
  }
  std::vector<Tensor> out;
  try {
    StageCall call(*this, s, in, ctx);
    out = handlers().run(s, call);
    if (out.size() != s.outputs.size())
      throw std::logic_error(fmt::format("hip: stage {} gave {} outputs, not {}", s.name, out.size(), s.outputs.size()));
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

}  // namespace tdiff::hip
