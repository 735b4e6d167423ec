#pragma once
// A dense, contiguous, row-major tensor of up to 5 dimensions.
// Owning tensors allocate their bytes; views point into memory someone else keeps alive
// (a memory-mapped safetensors file, a parent tensor), held through `keepalive`.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "base/dtype.h"

namespace tdiff {

using Shape = std::vector<std::int64_t>;
inline constexpr int kMaxRank = 5;

std::int64_t shape_numel(const Shape& s);
// Whether no value is NaN or Inf (vectorised; for checking converted weights).
bool all_finite(const double* v, std::int64_t n);
std::string shape_str(const Shape& s);  // "[2,40,64]"
// The shape without its size-1 dimensions: [1,200] and [200] hold the same tensor.
Shape squeezed(const Shape& s);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

class Tensor {
 public:
  Tensor() = default;
  // Owning and zero-filled.
  Tensor(DType dtype, Shape shape);
  // A view of `data` (not copied); `keepalive` owns the memory.
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  std::byte* raw() { return data_; }
  const std::byte* raw() const { return data_; }

  // Typed access; the element type must match the dtype (u8 also reads bool tensors,
  // std::uint16_t reads f16/bf16 bit patterns).
  template <class T> T* data() { check_type(sizeof(T), type_matches<T>()); return reinterpret_cast<T*>(data_); }
  template <class T> const T* data() const { check_type(sizeof(T), type_matches<T>()); return reinterpret_cast<const T*>(data_); }
  template <class T> std::span<T> span() { return {data<T>(), static_cast<std::size_t>(numel())}; }
  template <class T> std::span<const T> span() const { return {data<std::remove_const_t<T>>(), static_cast<std::size_t>(numel())}; }

  // Element `i` (flat index) as a double, for any dtype.
  double value(std::int64_t i) const;

  // A new owning tensor of another dtype: float<->float with round-to-nearest-even,
  // int/bool<->float exactly (float->int truncates toward zero and requires finite values).
  Tensor to(DType dtype) const;
  // Every element as float64 into dst (numel() values), exactly; typed loops, so converting
  // weights costs about what reading them does (bf16 is a shift).
  void to_f64(double* dst) const;
  // Columns [c0, c1) of every row of a 2-D tensor as float64 into dst ([rows, c1 - c0]): a
  // piece of a weight that stays in cache for the product that consumes it. Returns whether
  // every value is finite, found in the same pass.
  bool cols_to_f64(std::int64_t c0, std::int64_t c1, double* dst) const;
  Tensor clone() const;
  // Same bytes, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // A view of indices [r0, r1) of the first dimension (same bytes, no copy).
  Tensor rows(std::int64_t r0, std::int64_t r1) const;

 private:
  template <class T> bool type_matches() const;
  bool elements_to_f64(std::int64_t i0, std::int64_t n, double* dst) const;  // flat [i0, i0 + n), serial; all finite?
  void check_type(std::size_t size, bool match) const;

  DType dtype_ = DType::f64;
  Shape shape_;
  std::shared_ptr<void> keepalive_;
  std::byte* data_ = nullptr;
};

template <class T> bool Tensor::type_matches() const {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, std::uint16_t>) return dtype_ == DType::f16 || dtype_ == DType::bf16;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return dtype_ == DType::u8 || dtype_ == DType::boolean || dtype_ == DType::f8_e4m3;
  else return dtype_ == dtype_of<U>();
}

}  // namespace tdiff
