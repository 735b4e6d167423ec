#include "hip/hip_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
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
  const char* m = std::getenv("TDIFF_HIP_MEMLOG");
  memlog_ = m && *m && std::string(m) != "0";
  matrix_cores_ = has_matrix_cores(info_.arch);  // set_matrix_cores(false): the vector ALU
}

HipBackend::~HipBackend() {
  if (weights_) weights_->settle();
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
  if (compare_) stream_destroy(compare_);
}

// Waits for the compute and the copy stream; a kernel fault is reported with the stages that
// ran since the last sync (TDIFF_HIP_SYNC=1 syncs after every stage to pin it to one).
void HipBackend::sync_all(const char* when) {
  try {
    stream_sync(compute_);
    for (Stream c : copy_) stream_sync(c);
    if (compare_) stream_sync(compare_);
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
  if (weights_) weights_->settle();
  sync_all("waiting for the host copies");
  pending_.clear();
  for (Event e : events_in_use_) event_pool_.push_back(e);
  events_in_use_.clear();
}

void HipBackend::release(const std::string& key) { dev_.erase(key); }

std::map<std::string, std::string> HipBackend::environment() const {
  std::map<std::string, std::string> env{{"gpu", info_.name},
          {"gpu_arch", info_.arch},
          {"gpu_memory_bytes", std::to_string(info_.total_bytes)},
          {"gpu_driver", std::to_string(info_.driver)},
          {"gpu_runtime", std::to_string(info_.runtime)},
          {"gpu_platform", vendor::kPlatform},
          {"gpu_wave_size", std::to_string(info_.wave_size)},
          {"gpu_gemm", matrix_cores_ ? "matrix cores for 16-bit operands (fp32 GEMMs of bf16 numbers, attention)" : "vector ALU (bit-identical to emu)"}};
  if (weights_) env["gpu_weights"] = weights_description();  // once a run has asked for weights
  return env;
}

std::string HipBackend::weights_description() const {
  if (!weights_) return "none uploaded";
  const double gib = double(std::size_t{1} << 30);
  // How release codes reach the matrix-core GEMMs (TDIFF_HIP_DECODE); said only for a release checkpoint.
  const std::string codes =
      !weights_->holds_codes() ? ""
      : weights_->decode_once()
          ? fmt::format("; release codes decoded once into 16-bit operands ({:.2f} GiB decoded)", weights_->decoded_bytes() / gib)
          : fmt::format("; release codes decoded in the GEMM kernels ({:.2f} GiB if decoded once)", weights_->decoded_bytes() / gib);
  if (!weights_->streamed())
    return fmt::format("resident: {:.2f} GiB on the device (model files {:.2f} GiB, budget {:.2f} GiB){}", weights_->bytes() / gib,
                       weights_->model_bytes() / gib, weights_->budget() / gib, codes);
  return fmt::format("streamed layer by layer: model files {:.2f} GiB over the budget of {:.2f} GiB (TDIFF_HIP_WEIGHT_GB); "
                     "{:.2f} GiB held now; the forward waited {:.2f} s for layer uploads{}",
                     weights_->model_bytes() / gib, weights_->budget() / gib, weights_->bytes() / gib, weights_->wait_s(), codes);
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

DeviceWeights& HipBackend::weights(const WeightStore& w) {
  if (!weights_ || weights_of_ != &w) weights_ = DeviceWeights::of(w), weights_of_ = &w;
  return *weights_;
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
void HipBackend::reclaim_copies() {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const Pending& p) { return p.done && event_done(p.done); }),
                 pending_.end());
}

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
    p.done = next_event();
    event_record(p.done, copy);
    reclaim_copies();
    pending_.push_back(std::move(p));
  }
  t.host = host;
  remember(key, std::move(t));
  return host;
}

void HipBackend::remember(const std::string& key, DevTensor t) {
  if (snapshot_ && snapshot_keep_) {
    snapshot_->keep(key, t.buf, t.shape, t.dtype, compute_);  // in order: the output may be released after
  } else if (snapshot_) {
    // On a stream of its own, once the output is written: the comparisons (memory-bound)
    // overlap the next stages' kernels instead of queueing between them. The snapshot holds
    // the output until collect(), so its memory is not reused before they read it.
    if (!compare_) compare_ = stream_create(true);
    const Event ready = next_event();
    event_record(ready, compute_);
    stream_wait(compare_, ready);
    snapshot_->compare(key, t.buf, t.shape, t.dtype, compare_);
  }
  dev_[key] = std::move(t);
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
    if (policy_.split().active()) check_split(policy_.split(), ctx.config);  // a model the split cannot divide
    // The ranks' GEMMs read float32 weight slices; on the matrix cores that path is not built.
    if (policy_.split().tp > 1 && matrix_cores_)
      throw InputError(fmt::format("hip: --tp {} runs on the vector ALU only: add --hip-gemm vector",
                                   policy_.split().tp));
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
  if (memlog_) log_memory(s.name);
  return out;
}

void HipBackend::log_memory(const std::string& stage) const {
  std::size_t live = 0;
  for (const auto& [key, t] : dev_) live += static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  std::size_t kept = 0;
  for (const auto& [key, p] : partials_) kept += p.buf ? p.buf->bytes() : 0;
  const double gb = 1e-9;
  std::fprintf(stderr,
               "hip memory after %s: pool %.2f GB in use + %.2f GB cached; %zu live outputs %.2f GB; %zu host copies "
               "pending; weights %.2f GB; kept partials %.2f GB; device free %.2f GB\n",
               stage.c_str(), static_cast<double>(pool_.in_use()) * gb, static_cast<double>(pool_.cached()) * gb,
               dev_.size(), static_cast<double>(live) * gb, pending_.size(),
               weights_ ? static_cast<double>(weights_->bytes()) * gb : 0.0, static_cast<double>(kept) * gb,
               static_cast<double>(device_free_bytes()) * gb);
}

}  // namespace tdiff::hip
