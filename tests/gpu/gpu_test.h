#pragma once
// Shared helpers of the GPU tests: device buffers from host vectors and back, seeded random
// inputs (seed from the test's name), sentinels around outputs, and error measures against
// a float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu/arith.h"
#include "hip/device.h"

namespace tdiff::gpu1 {

using arith::Fmt;

// Lazily initialised device and one stream for all tests of the process.
inline hipStream_t test_stream() {
  static hipStream_t s = [] {
    hip::device_init();
    return hip::stream_create();
  }();
  return s;
}

// The test device's architecture name ("sm_90", "gfx90a:...").
inline std::string device_arch() {
  static const std::string arch = [] {
    test_stream();
    return hip::device_init().arch;
  }();
  return arch;
}

inline std::uint64_t name_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::uint64_t h = 1469598103934665603ull;
  for (const char* p : {info->test_suite_name(), info->name()})
    for (; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h;
}

// Non-zero values of magnitude in [lo, hi) with random sign, rounded to `f`.
inline std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float lo = 0.05f, float hi = 1.0f,
                                        Fmt f = Fmt::f32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = arith::round_fmt((rng() & 1 ? -1.0f : 1.0f) * mag(rng), f);
  return v;
}

constexpr std::int64_t kPad = 64;        // sentinel floats before and after every output
constexpr std::uint32_t kSentinel = 0x7fa5a5a5u;  // a NaN no kernel produces

// A device buffer of n elements of T with sentinels on both sides.
template <class T>
class Dev {
 public:
  explicit Dev(std::int64_t n) : n_(n), buf_(static_cast<std::size_t>(n + 2 * kPad) * sizeof(T)) {
    std::vector<T> h(static_cast<std::size_t>(n + 2 * kPad));
    std::fill(reinterpret_cast<unsigned char*>(h.data()), reinterpret_cast<unsigned char*>(h.data() + h.size()), 0xa5);
    hip::copy_h2d(buf_.get(), h.data(), h.size() * sizeof(T), test_stream());
    hip::stream_sync(test_stream());
  }
  explicit Dev(const std::vector<T>& v) : Dev(static_cast<std::int64_t>(v.size())) {
    hip::copy_h2d(ptr(), v.data(), v.size() * sizeof(T), test_stream());
    hip::stream_sync(test_stream());
  }
  T* ptr() const { return buf_.as<T>() + kPad; }
  // The contents; fails the test when a sentinel byte was overwritten.
  std::vector<T> get() const {
    std::vector<T> h(static_cast<std::size_t>(n_ + 2 * kPad));
    hip::copy_d2h(h.data(), buf_.get(), h.size() * sizeof(T), test_stream());
    hip::stream_sync(test_stream());
    const auto* bytes = reinterpret_cast<const unsigned char*>(h.data());
    const std::size_t pad = kPad * sizeof(T), total = h.size() * sizeof(T);
    for (std::size_t i = 0; i < pad; ++i) {
      EXPECT_EQ(bytes[i], 0xa5) << "sentinel before the output overwritten at byte " << i;
      EXPECT_EQ(bytes[total - pad + i], 0xa5) << "sentinel after the output overwritten at byte " << i;
      if (bytes[i] != 0xa5 || bytes[total - pad + i] != 0xa5) break;
    }
    return std::vector<T>(h.begin() + kPad, h.end() - kPad);
  }

 private:
  std::int64_t n_;
  hip::DeviceBuffer buf_;
};

// Error of a result against a float64 reference.
struct Error {
  double rel_l2 = 0, max_abs = 0, cosine = 1;
  std::int64_t non_finite = 0;
};
template <class T>
Error error_vs(const std::vector<T>& got, const std::vector<double>& ref) {
  Error e;
  double num = 0, den = 0, dot = 0, gg = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g)) ++e.non_finite;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
    dot += g * ref[i];
    gg += g * g;
    e.max_abs = std::max(e.max_abs, std::fabs(g - ref[i]));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.cosine = (gg > 0 && den > 0) ? dot / std::sqrt(gg * den) : 1.0;
  return e;
}

// Unit roundoff of a storage format.
inline double unit_roundoff(Fmt f) {
  switch (f) {
    case Fmt::bf16: return std::ldexp(1.0, -8);
    case Fmt::f16: return std::ldexp(1.0, -11);
    case Fmt::f8: return std::ldexp(1.0, -4);
    default: return std::ldexp(1.0, -24);
  }
}

// Largest difference in units of the last place of float between two results that should be
// bit-identical (0 when they are).
inline std::int64_t max_ulp_diff(const std::vector<float>& a, const std::vector<float>& b) {
  std::int64_t m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    const auto ia = static_cast<std::int64_t>(static_cast<std::int32_t>(arith::float_bits(a[i])));
    const auto ib = static_cast<std::int64_t>(static_cast<std::int32_t>(arith::float_bits(b[i])));
    m = std::max(m, std::abs(ia - ib));
  }
  return m;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace tdiff::gpu1
