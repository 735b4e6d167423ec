#pragma once
// Helpers of the GPU tests (tests/gpu/test_*.cpp): one stream for the process, seeded inputs
// (the seed comes from the test's name, so a failure reproduces by name), device buffers with
// sentinels around them, and the two comparisons every kernel test makes: hip against emu on
// the same rounded inputs (ulps of the output format) and hip against refcpu in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "emu/arith.h"
#include "hip/device.h"

namespace tdiff::gputest {

using arith::Fmt;

// Lazily initialised device and one stream for all tests of the process.
inline hip::Stream test_stream() {
  static hip::Stream s = [] {
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

// A generator seeded from the running test's full name; `salt` gives one test several
// independent streams (one per shape, say).
inline std::mt19937_64 test_rng(std::uint64_t salt = 0) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::mt19937_64(std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()) ^ salt);
}

// n values uniform in [lo, hi), rounded to f (zeros are replaced: inputs are non-zero).
inline std::vector<float> random_values(std::mt19937_64& rng, std::size_t n, float lo, float hi, Fmt f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = arith::round_fmt(u(rng), f);
    while (x == 0.0f);
  }
  return v;
}

// n values of magnitude in [lo, hi) with a random sign, rounded to f: with lo > 0 no operand
// comes near the subnormals that some matrix units flush.
inline std::vector<float> random_magnitudes(std::mt19937_64& rng, std::size_t n, float lo = 0.05f, float hi = 1.0f,
                                            Fmt f = Fmt::f32) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = arith::round_fmt((rng() & 1 ? -1.0f : 1.0f) * mag(rng), f);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// A device buffer of n elements of T between two zones of sentinel bytes (kPad elements
// each, a NaN pattern no kernel writes); get() copies it back and fails the test when a
// sentinel byte changed (an out-of-bounds write).
template <class T>
class Dev {
 public:
  static constexpr std::int64_t kPad = 64;
  static constexpr unsigned char kSentinel = 0xa5;

  explicit Dev(std::int64_t n) : n_(n), buf_(bytes(n + 2 * kPad)) {
    hip::memset_async(buf_.get(), kSentinel, bytes(n + 2 * kPad), test_stream());
    hip::stream_sync(test_stream());
  }
  explicit Dev(const std::vector<T>& v) : Dev(static_cast<std::int64_t>(v.size())) {
    if (!v.empty()) hip::copy_h2d(ptr(), v.data(), bytes(n_), test_stream());
    hip::stream_sync(test_stream());
  }
  T* ptr() const { return buf_.as<T>() + kPad; }
  std::vector<T> get() const {
    std::vector<T> h(static_cast<std::size_t>(n_ + 2 * kPad));
    hip::copy_d2h(h.data(), buf_.get(), bytes(n_ + 2 * kPad), test_stream());
    hip::stream_sync(test_stream());
    const auto* raw = reinterpret_cast<const unsigned char*>(h.data());
    const std::size_t pad = bytes(kPad), total = bytes(n_ + 2 * kPad);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < pad; ++i) bad += (raw[i] != kSentinel) + (raw[total - 1 - i] != kSentinel);
    EXPECT_EQ(bad, 0u) << "bytes written outside the output";
    return std::vector<T>(h.begin() + kPad, h.end() - kPad);
  }

 private:
  static std::size_t bytes(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(T); }
  std::int64_t n_;
  hip::DeviceBuffer buf_;
};

// Distance in units in the last place of format f between two floats that hold f values
// (the ordered float32 bit patterns differ by a multiple of 2^(23 − mantissa bits)).
inline double ulps(float a, float b, Fmt f) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0.0 : INFINITY;
  if (a == b) return 0.0;  // inf == inf, −0 == 0
  if (std::isinf(a) || std::isinf(b)) return INFINITY;
  auto ordered = [](float x) {
    const std::int64_t u = arith::float_bits(x);
    return (u & 0x80000000) ? -(u & 0x7fffffff) : u;
  };
  const int shift = f == Fmt::bf16 ? 16 : f == Fmt::f16 ? 13 : f == Fmt::f8 ? 20 : 0;
  return static_cast<double>(std::llabs(ordered(a) - ordered(b))) / static_cast<double>(1ll << shift);
}

// hip against emu: two results that should be (nearly) bit-identical.
struct UlpStats {
  double max_ulps = 0;
  std::size_t differ = 0;  // elements not bit-identical
  std::size_t count = 0;
  double scaled = 0;  // max |a − b| / max |b|: the difference relative to the output's scale
};
inline UlpStats ulp_stats(const std::vector<float>& a, const std::vector<float>& b, Fmt f) {
  UlpStats s;
  s.count = a.size();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double u = ulps(a[i], b[i], f);
    s.max_ulps = std::max(s.max_ulps, u);
    s.differ += u != 0.0;
    if (std::isfinite(a[i]) && std::isfinite(b[i])) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    }
  }
  s.scaled = scale > 0 ? diff / scale : diff;
  return s;
}

// hip (or emu) against a float64 reference.
struct Error {
  double rel_l2 = 0, max_abs = 0, cosine = 1;
  double scaled = 0;  // max |got − ref| / max |ref| over the finite reference values; inf where got is not finite
  std::int64_t non_finite = 0;
};
template <class T>
Error error_vs(const std::vector<T>& got, const std::vector<double>& ref) {
  Error e;
  double num = 0, den = 0, dot = 0, gg = 0, scale = 0;
  bool scaled_inf = false;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g)) ++e.non_finite;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
    dot += g * ref[i];
    gg += g * g;
    e.max_abs = std::max(e.max_abs, std::fabs(g - ref[i]));
    if (!std::isfinite(ref[i])) scaled_inf |= g != ref[i];
    else if (!std::isfinite(g)) scaled_inf = true;
    else e.scaled = std::max(e.scaled, std::fabs(g - ref[i])), scale = std::max(scale, std::fabs(ref[i]));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.cosine = (gg > 0 && den > 0) ? dot / std::sqrt(gg * den) : 1.0;
  e.scaled = scaled_inf ? INFINITY : scale > 0 ? e.scaled / scale : e.scaled;
  return e;
}

// The relative size of one ulp of a format at 1.0 (bf16 2^-7, fp16 2^-10, fp8 e4m3 2^-3,
// fp32 2^-23); the unit roundoff is half of it.
inline double unit_ulp(Fmt f) {
  return f == Fmt::bf16 ? 0x1p-7 : f == Fmt::f16 ? 0x1p-10 : f == Fmt::f8 ? 0x1p-3 : 0x1p-23;
}

// Milliseconds of one call of `launch` on the test stream, after one warm-up call.
template <class F>
double time_ms(F&& launch) {
  launch();
  hip::Event a = hip::event_create(), b = hip::event_create();
  hip::event_record(a, test_stream());
  launch();
  hip::event_record(b, test_stream());
  hip::event_sync(b);
  const double ms = hip::event_ms(a, b);
  hip::event_destroy(a), hip::event_destroy(b);
  return ms;
}

}  // namespace tdiff::gputest
