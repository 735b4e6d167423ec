// The on-device run comparison (hip/run_compare.h: compare_bits, RunSnapshot) against the host's bit_diff (checks/determinism.h): random
// tensors with some elements changed (by one ulp, by a lot, to NaN and infinity), as float32
// values, int64 selections and bool masks; then the snapshot's keep / compare / collect.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "checks/determinism.h"
#include "gpu_test.h"
#include "hip/run_compare.h"

namespace tdiff::gputest {
namespace {

// d_out after compare_bits of a and b (n elements of T).
template <class T>
hip::BitCount device_count(const std::vector<T>& a, const std::vector<T>& b) {
  Dev<T> d_a(a), d_b(b);
  Dev<hip::BitCount> d_out(1);
  hip::memset_async(d_out.ptr(), 0, sizeof(hip::BitCount), test_stream());
  hip::compare_bits(d_a.ptr(), d_b.ptr(), static_cast<std::int64_t>(a.size()), sizeof(T), d_out.ptr(), test_stream());
  return d_out.get()[0];
}

float max_abs_of(const hip::BitCount& c) {
  float m;
  std::memcpy(&m, &c.max_abs_bits, sizeof m);
  return m;
}

TEST(RunCompare, CountsAndLargestDifferenceEqualTheHosts) {
  auto rng = test_rng(7);
  for (const std::int64_t n : {1, 1000, 1 << 20}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto a = random_magnitudes(rng, static_cast<std::size_t>(n), 0.05f, 4.0f, Fmt::bf16);
    auto b = a;
    EXPECT_EQ(device_count(a, b).differing, 0u) << "identical tensors";
    // Changed: one float ulp, a large step, and (n > 2) a NaN and an infinity.
    b[0] = std::nextafter(b[0], 10.0f);
    if (n > 2) {
      b[static_cast<std::size_t>(n / 2)] += 3.0f;
      b[static_cast<std::size_t>(n - 1)] = std::numeric_limits<float>::quiet_NaN();
    }
    const hip::BitCount c = device_count(a, b);
    Tensor ta(DType::f32, {n}), tb(DType::f32, {n});
    std::memcpy(ta.raw(), a.data(), a.size() * 4);
    std::memcpy(tb.raw(), b.data(), b.size() * 4);
    const BitDiff host = bit_diff(ta, tb);
    EXPECT_EQ(static_cast<std::int64_t>(c.differing), host.differing);
    if (std::isinf(host.max_abs)) EXPECT_TRUE(std::isinf(max_abs_of(c)));
    else EXPECT_EQ(max_abs_of(c), static_cast<float>(host.max_abs));  // exact here: float differences
  }
  // int64 selections and bool masks.
  std::vector<std::int64_t> ia(5000), ib;
  for (std::size_t i = 0; i < ia.size(); ++i) ia[i] = static_cast<std::int64_t>(rng() % 256);
  ib = ia;
  ib[17] += 5, ib[4999] = -1;
  const hip::BitCount ci = device_count(ia, ib);
  EXPECT_EQ(ci.differing, 2u);
  EXPECT_EQ(max_abs_of(ci), static_cast<float>(std::max<double>(5, std::fabs(double(ia[4999]) + 1))));
  std::vector<std::uint8_t> ma(777, 1), mb(777, 1);
  mb[3] = 0;
  const hip::BitCount cm = device_count(ma, mb);
  EXPECT_EQ(cm.differing, 1u);
  EXPECT_EQ(max_abs_of(cm), 1.0f);
}

TEST(RunCompare, SnapshotKeepsComparesAndCopiesOnlyWhatDiffers) {
  auto rng = test_rng(9);
  const auto v = random_magnitudes(rng, 4096, 0.05f, 1.0f);
  auto w = v;
  w[100] = -w[100];
  auto upload = [&](const std::vector<float>& x) {
    auto buf = std::make_shared<hip::DeviceBuffer>(x.size() * 4);
    hip::copy_h2d(buf->get(), x.data(), x.size() * 4, test_stream());
    return buf;
  };
  hip::RunSnapshot snap;
  snap.keep("a/x", upload(v), {64, 64}, DType::f32, test_stream());
  snap.keep("b/y", upload(v), {4096}, DType::f32, test_stream());
  EXPECT_EQ(snap.kept_bytes(), 2u * 4096 * 4);
  snap.compare("a/x", upload(v), {64, 64}, DType::f32, test_stream());
  snap.compare("b/y", upload(w), {4096}, DType::f32, test_stream());
  snap.compare("c/z", upload(v), {4096}, DType::f32, test_stream());  // not in run 1
  const auto diffs = snap.collect(test_stream());
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_EQ(diffs[0].key, "a/x");
  EXPECT_EQ(diffs[0].differing, 0);
  EXPECT_FALSE(diffs[0].base.defined()) << "an identical tensor is not copied";
  EXPECT_EQ(diffs[1].differing, 1);
  EXPECT_EQ(diffs[1].max_abs, static_cast<double>(2 * std::fabs(v[100])));
  ASSERT_TRUE(diffs[1].base.defined() && diffs[1].other.defined());
  EXPECT_EQ(diffs[1].other.data<float>()[100], w[100]);
  EXPECT_EQ(diffs[2].differing, 4096) << "an output run 1 lacked differs everywhere";
  EXPECT_TRUE(snap.collect(test_stream()).empty()) << "collect empties the run";
}

}  // namespace
}  // namespace tdiff::gputest
