#include "hip/device_weights.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "formats/release_format.h"
#include "formats/safetensors.h"

namespace tdiff::hip {

using arith::Fmt;

namespace {

std::string model_identity(const ModelWeights& files) {
  namespace fs = std::filesystem;
  std::string id = fs::weakly_canonical(files.dir()).string();
  for (const auto& f : files.files()) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    const auto time = fs::last_write_time(f, ec).time_since_epoch().count();
    id += fmt::format("|{}:{}:{}", f, size, time);
  }
  return id;
}

constexpr const char* kLayerPrefix = "model.layers.";

// The decoder layer of an HF parameter name and the name after "model.layers.{i}." (-1 and the
// whole name outside the layers).
std::pair<int, std::string> layer_of(const std::string& name) {
  const std::string prefix = kLayerPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return {-1, name};
  const auto dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {-1, name};
  return {std::stoi(name.substr(prefix.size(), dot - prefix.size())), name.substr(dot + 1)};
}

}  // namespace

std::shared_ptr<DeviceWeights> DeviceWeights::of(const WeightStore& w) {
  // Never destroyed: the device memory goes with the process (a static destructor would run
  // after the GPU runtime has shut down).
  static auto* registry = new std::map<std::string, std::shared_ptr<DeviceWeights>>();
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  auto& slot = (*registry)[model_identity(w.files())];
  if (!slot) slot = std::make_shared<DeviceWeights>(w);
  return slot;
}

DeviceWeights::DeviceWeights(const WeightStore& w) {
  for (const auto& f : w.files().files()) model_bytes_ += static_cast<std::size_t>(std::filesystem::file_size(f));
  const char* gb = std::getenv("TDIFF_HIP_WEIGHT_GB");
  if (gb && *gb) {
    char* end = nullptr;
    const double v = std::strtod(gb, &end);
    if (end == gb || *end != '\0' || !(v >= 0))
      input_error("TDIFF_HIP_WEIGHT_GB='{}' is not a number of GiB (the device memory the weights may take)", gb);
    budget_ = static_cast<std::size_t>(v * double(std::size_t{1} << 30));
  } else {
    // The activations of a real-width forward (4096 tokens: logits 2.1 GB, the routed experts'
    // gathered rows, attention scratch) fit in 16 GiB.
    const std::size_t free_b = device_free_bytes(), reserve = std::size_t{16} << 30;
    budget_ = free_b > reserve ? free_b - reserve : 0;
  }
  streamed_ = model_bytes_ > budget_;
  if (streamed_) upload_ = stream_create();
  // The model with its release codes decoded into 16-bit operands: FP8 (one byte a value) and
  // FP4 (I8, two values a byte) become two bytes a value; everything else stays as stored.
  const ModelWeights& files = w.files();
  for (const auto& name : files.names()) {
    const TensorInfo& t = files.info(name);
    const std::size_t stored = t.end - t.begin;
    const bool fp8 = w.release_layout() && t.dtype == DType::f8_e4m3, fp4 = w.release_layout() && t.format == "I8";
    decoded_bytes_ += fp8 ? stored * 2 : fp4 ? stored * 4 : stored;
    holds_codes_ = holds_codes_ || fp8 || fp4;
  }
  const char* mode = std::getenv("TDIFF_HIP_DECODE");
  const std::string m = mode && *mode ? mode : "auto";
  if (m == "once") decode_once_ = true;
  else if (m == "kernel") decode_once_ = false;
  else if (m == "auto") decode_once_ = !streamed_ && decoded_bytes_ <= budget_;
  else input_error("TDIFF_HIP_DECODE='{}' is not auto, once or kernel (how release codes reach the GEMMs)", m);
}

DeviceWeights::~DeviceWeights() {
  if (prefetcher_.joinable()) prefetcher_.join();
  if (upload_) stream_destroy(upload_);
}

std::size_t DeviceWeights::bytes() const {
  const std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [key, h] : held_) n += h->bytes();
  return n;
}

void DeviceWeights::upload_bytes(WeightStore& w, void* dst, const void* src, std::size_t bytes, Stream s) {
  const auto at = streamed_ ? w.files().locate(src, bytes) : std::nullopt;
  if (at) reader_.read(dst, at->fd, at->path, at->offset, bytes, s);
  else copy_h2d(dst, src, bytes, s);
}

DeviceBuffer DeviceWeights::load(WeightStore& w, const std::string& name, Fmt in, Stream s) {
  const Shape& shape = w.shape(name);
  const std::int64_t n = shape_numel(shape), cols = shape.back(), rows = n / cols;
  DeviceBuffer buf(static_cast<std::size_t>(n) * 4);
  if (w.stored_format(name) != ReleaseFormat::plain) {
    // Decoded on the device from the codes (exact in float32: emu/release_codes.h).
    dequantize_weight(obtain(w, {name, kQuant}, s).quant, rows, cols, buf.as<float>(), s);
  } else {
    // F32 or BF16 from tdiff synth (f16 / f64 also read) as float32, without the float64 copy
    // WeightStore::f64 would keep: float32 copied as it is, 16-bit patterns copied and widened
    // on the device, f64 converted on the host in chunks.
    const Tensor t = w.stored(name);
    if (t.dtype() == DType::f32) {
      upload_bytes(w, buf.get(), t.raw(), static_cast<std::size_t>(n) * 4, s);
    } else if (t.dtype() == DType::bf16 || t.dtype() == DType::f16) {
      const DeviceBuffer bits(static_cast<std::size_t>(n) * 2);
      upload_bytes(w, bits.get(), t.raw(), static_cast<std::size_t>(n) * 2, s);
      widen_bits16(bits.as<std::uint16_t>(), buf.as<float>(), n, t.dtype() == DType::bf16 ? Fmt::bf16 : Fmt::f16, s);
      stream_sync(s);  // bits is about to go
    } else {
      constexpr std::int64_t kChunk = std::int64_t{1} << 24;
      std::vector<float> v;
      for (std::int64_t c0 = 0; c0 < n; c0 += kChunk) {
        const std::int64_t c1 = std::min(n, c0 + kChunk);
        v.resize(static_cast<std::size_t>(c1 - c0));
        for (std::int64_t i = c0; i < c1; ++i) v[static_cast<std::size_t>(i - c0)] = static_cast<float>(t.value(i));
        copy_h2d(buf.as<float>() + c0, v.data(), v.size() * 4, s);
        stream_sync(s);  // v is refilled next
      }
    }
  }
  quantize_weight(buf.as<float>(), rows, cols, in, s);
  stream_sync(s);
  return buf;
}

DeviceWeights::Held DeviceWeights::make(WeightStore& w, const Key& key, Stream s) {
  const auto& [name, form] = key;
  Held h;
  if (form == kQuant) {
    h = w.stored_format(name) == ReleaseFormat::fp8 ? upload_fp8(w, name, s) : upload_fp4(w, name, s);
  } else if (form >= kBits16 && form < kQuant) {
    const auto in = static_cast<Fmt>(form - kBits16);
    const std::int64_t n = shape_numel(w.shape(name));
    if (w.stored_format(name) != ReleaseFormat::plain) {
      h.buf = decode_bits16(w, name, in, s);
      stream_sync(s);
      return h;
    }
    const Tensor t = w.stored(name);
    h.buf = DeviceBuffer(static_cast<std::size_t>(n) * 2);
    if (t.dtype() == DType::bf16 && in == Fmt::bf16) {
      // A bf16 operand of a bf16 weight is the weight: its stored patterns, copied as they are.
      upload_bytes(w, h.buf.get(), t.raw(), static_cast<std::size_t>(n) * 2, s);
    } else {
      const DeviceBuffer f = load(w, name, in, s);
      pack_bits16(f.as<float>(), h.buf.as<std::uint16_t>(), n, in, s);
    }
  } else if (form == kBf16Flag) {
    h.flag = w.stored_format(name) == ReleaseFormat::plain && w.stored(name).dtype() == DType::bf16;
    if (!h.flag) {  // float32 files (a converted checkpoint) and release codes may still hold bf16 numbers
      const DeviceBuffer f = load(w, name, Fmt::f32, s);
      DeviceBuffer flag(sizeof(int));
      memset_async(flag.get(), 0, sizeof(int), s);
      mark_inexact_operands(f.as<float>(), static_cast<std::int64_t>(f.bytes() / 4), Fmt::bf16, flag.as<int>(), s);
      int inexact = 1;
      copy_d2h(&inexact, flag.get(), sizeof(int), s);
      stream_sync(s);
      h.flag = inexact == 0;
    }
  } else if (form == kTable) {
    const Tensor& t = w.i64(name);
    h.buf = DeviceBuffer(static_cast<std::size_t>(std::max<std::int64_t>(t.numel(), 1)) * 8);
    copy_h2d(h.buf.get(), t.raw(), t.nbytes(), s);
  } else {
    h.buf = load(w, name, static_cast<Fmt>(form - kF32), s);
  }
  stream_sync(s);  // ready for every stream; host sources may go
  return h;
}

const DeviceWeights::Held& DeviceWeights::obtain(WeightStore& w, const Key& key, Stream s) {
  std::unique_lock lock(mutex_);
  for (;;) {
    auto it = held_.find(key);
    if (it != held_.end()) return *it->second;
    if (!loading_.count(key)) break;
    done_.wait(lock);  // another thread is making it
  }
  loading_.insert(key);
  lock.unlock();
  std::unique_ptr<Held> h;
  try {
    h = std::make_unique<Held>(make(w, key, s));
  } catch (...) {
    lock.lock();
    loading_.erase(key);
    done_.notify_all();
    throw;
  }
  lock.lock();
  loading_.erase(key);
  const Held& out = *held_.emplace(key, std::move(h)).first->second;
  done_.notify_all();
  return out;
}

void DeviceWeights::on_request(WeightStore& w, const Key& key, Stream s) {
  if (!streamed_ || key.second == kTable) return;  // tables are small and stay (WeightStore owns their host copy)
  const auto [layer, rest] = layer_of(key.first);
  if (layer < 0) return;
  std::vector<Key> next;
  {
    const std::lock_guard lock(mutex_);
    pattern_.emplace(rest, key.second);
    if (layer == layer_) return;
  }
  // The forward enters `layer`: the prefetch of it (started one layer ago) must be done
  // before another starts; then the earlier layers go and layer + 1 starts coming.
  settle();
  stream_sync(s);  // the kernels of the layers about to go are done
  const std::lock_guard lock(mutex_);
  for (auto it = held_.begin(); it != held_.end();) {
    const int l = layer_of(it->first.first).first;
    if (l >= 0 && (l < layer || l > layer + 1)) it = held_.erase(it);
    else ++it;
  }
  layer_ = layer;
  for (const auto& [suffix, form] : pattern_) {
    const std::string name = fmt::format("{}{}.{}", kLayerPrefix, layer + 1, suffix);
    if (w.has(name)) next.emplace_back(name, form);
  }
  if (!next.empty()) prefetcher_ = std::thread([this, &w, next] { prefetch(w, next); });
}

void DeviceWeights::settle() {
  if (!prefetcher_.joinable()) return;
  const auto t0 = std::chrono::steady_clock::now();
  prefetcher_.join();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DeviceWeights::prefetch(WeightStore& w, const std::vector<Key>& keys) {
  for (const auto& key : keys) {
    try {
      obtain(w, key, upload_);
    } catch (...) {  // the forward asks for it again and reports the error at its stage
    }
  }
}

const float* DeviceWeights::f32(WeightStore& w, const std::string& name, Fmt in, Stream s) {
  const Key key{name, kF32 + static_cast<int>(in)};
  on_request(w, key, s);
  return obtain(w, key, s).buf.as<float>();
}

GemmWeight DeviceWeights::gemm(WeightStore& w, const std::string& name, const GemmSpec& spec, Stream s) {
  if (!runs_on_matrix_cores(spec)) return f32(w, name, spec.in, s);
  const bool quant = w.stored_format(name) != ReleaseFormat::plain && !decode_once_;
  const Key key{name, quant ? kQuant : kBits16 + static_cast<int>(spec.in)};
  on_request(w, key, s);
  const Held& h = obtain(w, key, s);
  return quant ? GemmWeight(h.quant) : GemmWeight(h.buf.as<std::uint16_t>());
}

bool DeviceWeights::holds_bf16(WeightStore& w, const std::string& name, Stream s) {
  const Key key{name, kBf16Flag};
  on_request(w, key, s);
  return obtain(w, key, s).flag;
}

const std::int64_t* DeviceWeights::table_i64(WeightStore& w, const std::string& name, Stream s) {
  const Key key{name, kTable};
  on_request(w, key, s);
  return obtain(w, key, s).buf.as<std::int64_t>();
}

DeviceWeights::Held DeviceWeights::upload_fp8(WeightStore& w, const std::string& name, Stream s) {
  const auto parts = w.fp8_parts(name);
  const std::int64_t O = parts.codes.dim(0), K = parts.codes.dim(1);
  // The scales as float32 (exact: E8M0 powers of two and F32 scales are floats); a NaN, infinite
  // or non-positive one is an InputError naming it, as the float64 dequantisation says it.
  const std::vector<double> sc = scale_values(parts.scale, parts.what);
  const std::vector<float> scale(sc.begin(), sc.end());
  Held h;
  h.buf = DeviceBuffer(static_cast<std::size_t>(O * K));
  h.scale = DeviceBuffer(scale.size() * 4);
  upload_bytes(w, h.buf.get(), parts.codes.raw(), static_cast<std::size_t>(O * K), s);
  copy_h2d(h.scale.get(), scale.data(), scale.size() * 4, s);
  h.quant = {QuantWeight::Format::fp8, h.buf.as<std::uint8_t>(), h.scale.as<float>(), nullptr};
  DeviceBuffer flag(sizeof(int));
  memset_async(flag.get(), 0, sizeof(int), s);
  mark_nan_codes(h.quant, O, K, flag.as<int>(), s);
  int nan = 0;
  copy_d2h(&nan, flag.get(), sizeof(int), s);
  stream_sync(s);  // scale (host) goes next
  if (nan) dequantize_fp8(parts.codes, parts.scale, parts.what);  // names the first NaN code (InputError)
  release_resident_pages(parts.codes.raw(), parts.codes.nbytes());
  return h;
}

DeviceBuffer DeviceWeights::decode_bits16(WeightStore& w, const std::string& name, Fmt in, Stream s) {
  const Shape& shape = w.shape(name);
  const std::int64_t n = shape_numel(shape), K = shape.back();
  // The codes and scales as stored, for the length of the decode only.
  const Held q = w.stored_format(name) == ReleaseFormat::fp8 ? upload_fp8(w, name, s) : upload_fp4(w, name, s);
  DeviceBuffer out(static_cast<std::size_t>(n) * 2);
  decode_weight_bits16(q.quant, n / K, K, in, out.as<std::uint16_t>(), s);
  stream_sync(s);  // q goes next
  return out;
}

DeviceWeights::Held DeviceWeights::upload_fp4(WeightStore& w, const std::string& name, Stream s) {
  // Every expert's parts stacked as the HF tensor's rows: [E * R, ceil(K/2)] codes and
  // [E * R, ceil(K/32)] E8M0 bytes (E2M1 has no NaN code; scale_values refuses a NaN scale).
  const Shape& shape = w.shape(name);
  const std::int64_t E = shape.at(0), rows = shape.at(1), K = shape.at(2), packed = (K + 1) / 2, groups = (K + 31) / 32;
  Held h;
  h.buf = DeviceBuffer(static_cast<std::size_t>(E * rows * packed));
  h.scale = DeviceBuffer(static_cast<std::size_t>(E * rows * groups));
  std::int64_t row = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    for (const auto& part : w.fp4_parts(name, e)) {
      const std::int64_t r = part.codes.dim(0);
      scale_values(part.scale, part.what);
      upload_bytes(w, h.buf.as<std::uint8_t>() + row * packed, part.codes.raw(), static_cast<std::size_t>(r * packed), s);
      upload_bytes(w, h.scale.as<std::uint8_t>() + row * groups, part.scale.raw(), static_cast<std::size_t>(r * groups), s);
      stream_sync(s);  // the mapped pages may go once copied
      release_resident_pages(part.codes.raw(), part.codes.nbytes());
      row += r;
    }
  }
  if (row != E * rows) throw std::logic_error("hip: the FP4 experts of " + name + " do not fill its rows");
  h.quant = {QuantWeight::Format::fp4, h.buf.as<std::uint8_t>(), nullptr, h.scale.as<std::uint8_t>()};
  return h;
}

}  // namespace tdiff::hip
