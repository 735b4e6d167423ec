#pragma once
// Helpers of the HIP-2 kernel tests (tests/gpu/test_{attention,compressor,indexer,topk,
// hyper_connection}.cpp): seeded inputs, device buffers with guard zones, and the two
// comparisons every test makes — hip against emu on the same rounded inputs (ulps of the
// output format) and hip against refcpu in float64 (error relative to the output's scale).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "emu/arith.h"
#include "hip/device.h"

namespace tdiff::gputest {

// A generator seeded from the running test's full name, so a failure reproduces by name.
inline std::mt19937_64 test_rng() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::mt19937_64(std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()));
}

// n values uniform in [lo, hi), rounded to f (zeros are replaced: inputs are non-zero).
inline std::vector<float> random_values(std::mt19937_64& rng, std::size_t n, float lo, float hi, arith::Fmt f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = arith::round_fmt(u(rng), f);
    while (x == 0.0f);
  }
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The device's stream for a test, synchronised (faults surface as DeviceError) by sync().
struct GpuStream {
  hip::Stream s = hip::stream_create();
  ~GpuStream() { hip::stream_destroy(s); }
  void sync() const { hip::stream_sync(s); }
};

// Device copy of a host vector.
template <class T>
struct DeviceIn {
  hip::DeviceBuffer buf;
  DeviceIn(const std::vector<T>& h, hip::Stream s) : buf(std::max<std::size_t>(1, h.size()) * sizeof(T)) {
    if (!h.empty()) hip::copy_h2d(buf.get(), h.data(), h.size() * sizeof(T), s);
  }
  const T* get() const { return buf.as<T>(); }
};

// A device output of `count` elements between two guard zones filled with a sentinel; read()
// copies it back and fails the test when a guard byte changed (an out-of-bounds write).
template <class T>
struct DeviceOut {
  static constexpr std::size_t kGuard = 256;  // elements on each side
  static constexpr unsigned char kSentinel = 0xa5;
  std::size_t count;
  hip::DeviceBuffer buf;
  DeviceOut(std::size_t n, hip::Stream s) : count(n), buf((n + 2 * kGuard) * sizeof(T)) {
    hip::memset_async(buf.get(), kSentinel, (n + 2 * kGuard) * sizeof(T), s);
  }
  T* get() const { return buf.as<T>() + kGuard; }
  std::vector<T> read(hip::Stream s) const {
    std::vector<unsigned char> raw((count + 2 * kGuard) * sizeof(T));
    hip::copy_d2h(raw.data(), buf.get(), raw.size(), s);
    hip::stream_sync(s);
    const std::size_t g = kGuard * sizeof(T);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < g; ++i) bad += (raw[i] != kSentinel) + (raw[raw.size() - 1 - i] != kSentinel);
    EXPECT_EQ(bad, 0u) << "bytes written outside the output";
    std::vector<T> out(count);
    std::memcpy(out.data(), raw.data() + g, count * sizeof(T));
    return out;
  }
};

// Distance in units in the last place of format f between two floats that hold f values
// (the ordered float32 bit patterns differ by a multiple of 2^(23 − mantissa bits)).
inline double ulps(float a, float b, arith::Fmt f) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0.0 : INFINITY;
  if (a == b) return 0.0;  // inf == inf, −0 == 0
  if (std::isinf(a) || std::isinf(b)) return INFINITY;
  auto ordered = [](float x) {
    const std::int64_t u = arith::float_bits(x);
    return (u & 0x80000000) ? -(u & 0x7fffffff) : u;
  };
  const int shift = f == arith::Fmt::bf16 ? 16 : f == arith::Fmt::f16 ? 13 : f == arith::Fmt::f8 ? 20 : 0;
  return static_cast<double>(std::llabs(ordered(a) - ordered(b))) / static_cast<double>(1ll << shift);
}

struct UlpStats {
  double max_ulps = 0;
  std::size_t differ = 0;  // elements not bit-identical
  std::size_t count = 0;
  double scaled = 0;  // max |a − b| / max |b|: the difference relative to the output's scale
};
inline UlpStats ulp_stats(const std::vector<float>& a, const std::vector<float>& b, arith::Fmt f) {
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

// max |x − ref| / max |ref| over the finite reference values (NaN or inf in x: infinity).
inline double rel_error(const std::vector<float>& x, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(ref[i])) {
      if (x[i] != ref[i]) return INFINITY;
      continue;
    }
    if (!std::isfinite(x[i])) return INFINITY;
    err = std::max(err, std::abs(x[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? err / scale : err;
}

// The relative size of one ulp of a format at 1.0 (bf16 2^-7, fp16 2^-10, fp32 2^-23).
inline double unit_ulp(arith::Fmt f) {
  return f == arith::Fmt::bf16 ? 0x1p-7 : f == arith::Fmt::f16 ? 0x1p-10 : f == arith::Fmt::f8 ? 0x1p-3 : 0x1p-23;
}

// Milliseconds of one call of `launch` on stream s, after one warm-up call.
template <class F>
double time_ms(hip::Stream s, F&& launch) {
  launch();
  hip::Event a = hip::event_create(), b = hip::event_create();
  hip::event_record(a, s);
  launch();
  hip::event_record(b, s);
  hip::event_sync(b);
  const double ms = hip::event_ms(a, b);
  hip::event_destroy(a), hip::event_destroy(b);
  return ms;
}

}  // namespace tdiff::gputest
