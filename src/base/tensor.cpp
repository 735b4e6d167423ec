#include "base/tensor.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace tdiff {

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  if (rank() > kMaxRank) throw std::invalid_argument("tensor rank above 5: " + shape_str(shape_));
  for (auto d : shape_)
    if (d < 0) throw std::invalid_argument("negative dimension in " + shape_str(shape_));
  // numel() and nbytes() multiply in 64 bits: a shape whose product wraps would allocate a
  // few bytes for a tensor its users index far beyond.
  if (std::find(shape_.begin(), shape_.end(), 0) == shape_.end()) {
    std::int64_t bytes = static_cast<std::int64_t>(dtype_size(dtype_));
    for (auto d : shape_)
      if (__builtin_mul_overflow(bytes, d, &bytes))
        throw std::invalid_argument("tensor of shape " + shape_str(shape_) + " holds more than 2^63 bytes");
  }
  // calloc, not new[]() : a large block comes from fresh pages the kernel has zeroed, which
  // the program does not write over once more (a real-width activation is a gigabyte).
  void* p = std::calloc(std::max<std::size_t>(nbytes(), 1), 1);
  if (!p) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  keepalive_ = std::shared_ptr<void>(p, std::free);
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  if (t.rank() > kMaxRank) throw std::invalid_argument("tensor rank above 5: " + shape_str(t.shape_));
  t.data_ = static_cast<std::byte*>(data);
  t.keepalive_ = std::move(keepalive);
  return t;
}

void Tensor::check_type(std::size_t size, bool match) const {
  if (!match || size != dtype_size(dtype_))
    throw std::logic_error(fmt::format("tensor of dtype {} read with a {}-byte element type",
                                       dtype_name(dtype_), size));
}

double Tensor::value(std::int64_t i) const {
  const std::byte* p = data_ + static_cast<std::size_t>(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::f16: { std::uint16_t v; std::memcpy(&v, p, 2); return f16_value(v); }
    case DType::bf16: { std::uint16_t v; std::memcpy(&v, p, 2); return bf16_value(v); }
    case DType::f8_e4m3: return f8e4m3_value(static_cast<std::uint8_t>(*p));
    case DType::i64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::i32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::u8: case DType::boolean: return static_cast<double>(static_cast<std::uint8_t>(*p));
  }
  return 0;
}

namespace {
void store(std::byte* p, DType t, double v) {
  switch (t) {
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::f16: { auto b = f16_bits(v); std::memcpy(p, &b, 2); break; }
    case DType::bf16: { auto b = bf16_bits(v); std::memcpy(p, &b, 2); break; }
    case DType::f8_e4m3: *p = static_cast<std::byte>(f8e4m3_bits(v)); break;
    case DType::i64: { auto i = static_cast<std::int64_t>(v); std::memcpy(p, &i, 8); break; }
    case DType::i32: { auto i = static_cast<std::int32_t>(v); std::memcpy(p, &i, 4); break; }
    case DType::u8: *p = static_cast<std::byte>(static_cast<std::uint8_t>(v)); break;
    case DType::boolean: *p = static_cast<std::byte>(v != 0.0 ? 1 : 0); break;
  }
}
}  // namespace

// Finiteness on the bits, branch-free so that it vectorises: a value is NaN or Inf when its
// exponent is all ones, and adding one to that exponent carries into the sign bit, which no
// finite value's does.
bool all_finite(const double* v, std::int64_t n) {
  constexpr std::uint64_t kExponent = std::uint64_t{0x7FF} << 52, kOne = std::uint64_t{1} << 52;
  std::uint64_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) bad |= (std::bit_cast<std::uint64_t>(v[i]) & kExponent) + kOne;
  return (bad >> 63) == 0;
}

bool Tensor::elements_to_f64(std::int64_t i0, std::int64_t n, double* dst) const {
  switch (dtype_) {
    case DType::f64:
      if (n) std::memcpy(dst, data_ + i0 * 8, static_cast<std::size_t>(n) * 8);
      return all_finite(dst, n);
    case DType::f32: case DType::bf16: {  // finiteness as all_finite's, on float32 bits
      std::uint32_t bad = 0;
      if (dtype_ == DType::f32) {
        const auto* f = reinterpret_cast<const std::uint32_t*>(data_) + i0;
        for (std::int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(f[i]), bad |= (f[i] & 0x7F800000u) + 0x00800000u;
      } else {  // the upper half of a float32
        const auto* b = reinterpret_cast<const std::uint16_t*>(data_) + i0;
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint32_t u = static_cast<std::uint32_t>(b[i]) << 16;
          dst[i] = std::bit_cast<float>(u), bad |= (u & 0x7F800000u) + 0x00800000u;
        }
      }
      return (bad >> 31) == 0;
    }
    default: {
      bool finite = true;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = value(i0 + i), finite = finite && std::isfinite(dst[i]);
      return finite;
    }
  }
}

void Tensor::to_f64(double* dst) const {
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  const std::int64_t n = numel(), blocks = (n + kBlock - 1) / kBlock;
  // Threads only where they pay (never nested).
#pragma omp parallel for schedule(static) if (n > (std::int64_t{1} << 20))
  for (std::int64_t b = 0; b < blocks; ++b)
    elements_to_f64(b * kBlock, std::min(kBlock, n - b * kBlock), dst + b * kBlock);
}

bool Tensor::cols_to_f64(std::int64_t c0, std::int64_t c1, double* dst) const {
  if (rank() != 2 || c0 < 0 || c1 < c0 || c1 > dim(1))
    throw std::logic_error(fmt::format("cols_to_f64: columns [{}, {}) of a {} tensor", c0, c1, shape_str(shape_)));
  // A row's columns are a short stream the hardware prefetcher barely starts on (the rows of a
  // weight tile are kilobytes apart), so a few rows ahead are fetched by hand.
  constexpr std::int64_t kAhead = 4;
  const std::size_t esize = dtype_size(dtype_), bytes = static_cast<std::size_t>(c1 - c0) * esize;
  bool finite = true;
  for (std::int64_t r = 0; r < dim(0); ++r) {
    if (r + kAhead < dim(0)) {
      const std::byte* ahead = data_ + static_cast<std::size_t>((r + kAhead) * dim(1) + c0) * esize;
      for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(ahead + b);
    }
    finite &= elements_to_f64(r * dim(1) + c0, c1 - c0, dst + r * (c1 - c0));
  }
  return finite;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  if (dtype == DType::f64) {
    Tensor out(dtype, shape_);
    to_f64(out.data<double>());
    return out;
  }
  Tensor out(dtype, shape_);
  const std::int64_t n = numel();
  const bool to_int = !is_float(dtype);
  const std::size_t es = dtype_size(dtype);
  if (!to_int) {  // cannot throw: elementwise on every thread (a V4-Flash layer is 10^10 elements)
#pragma omp parallel for schedule(static) if (n > (std::int64_t{1} << 20))
    for (std::int64_t i = 0; i < n; ++i) store(out.data_ + static_cast<std::size_t>(i) * es, dtype, value(i));
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    double v = value(i);
    if (to_int && !std::isfinite(v))
      throw InputError(fmt::format("cannot convert non-finite value to {}", dtype_name(dtype)));
    store(out.data_ + static_cast<std::size_t>(i) * es, dtype, v);
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor out(dtype_, shape_);
  if (nbytes()) std::memcpy(out.data_, data_, nbytes());
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel())
    throw std::invalid_argument(fmt::format("reshape {} -> {}", shape_str(shape_), shape_str(shape)));
  return view(dtype_, std::move(shape), data_, keepalive_);
}

Tensor Tensor::rows(std::int64_t r0, std::int64_t r1) const {
  if (rank() == 0 || r0 < 0 || r1 < r0 || r1 > shape_[0])
    throw std::invalid_argument(fmt::format("rows [{}, {}) of a tensor of shape {}", r0, r1, shape_str(shape_)));
  Shape s = shape_;
  s[0] = r1 - r0;
  const std::size_t row_bytes = shape_[0] ? nbytes() / static_cast<std::size_t>(shape_[0]) : 0;
  return view(dtype_, std::move(s), data_ + static_cast<std::size_t>(r0) * row_bytes, keepalive_);
}

Shape squeezed(const Shape& s) {
  Shape out;
  for (auto d : s)
    if (d != 1) out.push_back(d);
  return out;
}

}  // namespace tdiff
