// Throughput of tensor_metrics over two float32 tensors (1 GiB each by default), printed next
// to this machine's streaming-read bandwidth measured in the same run: the metrics are one
// pass over memory, so the read bandwidth is their ceiling.
//
//   bench_diff [--gib N] [--reps R]
//
// The data is the same formula as numpy_metrics.py, so run.sh can check both agree.
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "diff/metrics.h"

namespace {

using clock_type = std::chrono::steady_clock;

// r_i: a multiplicative hash of i in [-0.5, 0.5); c_i: r_i plus up to +-5e-4.
void fill(float* r, float* c, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::uint64_t>(i);
    const double a = static_cast<double>((u * 2654435761ull) & 0xFFFFFFFFull) / 4294967296.0 - 0.5;
    const float rf = static_cast<float>(a);
    const double g = static_cast<double>((u * 40503ull) & 0xFFFFull) / 65536.0 - 0.5;
    r[i] = rf;
    c[i] = static_cast<float>(static_cast<double>(rf) + 1e-3 * g);
  }
}

// Reads every byte once (an XOR of 64-bit words: vectorised, no floating-point order to keep).
std::uint64_t stream_read(const void* p, std::size_t bytes) {
  const auto* w = static_cast<const std::uint64_t*>(p);
  const auto n = static_cast<std::int64_t>(bytes / 8);
  std::uint64_t x = 0;
#pragma omp parallel for schedule(static) reduction(^ : x)
  for (std::int64_t i = 0; i < n; ++i) x ^= w[i];
  return x;
}

template <class F> double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int k = 0; k < reps; ++k) {
    const auto t0 = clock_type::now();
    f();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1.0;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gib" && i + 1 < argc) gib = std::atof(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      fmt::print(stderr, "usage: bench_diff [--gib N] [--reps R]\n");
      return 2;
    }
  }
  const auto n = static_cast<std::int64_t>(gib * (1ull << 30) / sizeof(float));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  // Raw new[]: no zero-fill pass; the parallel fill touches pages from the threads that read them.
  std::shared_ptr<float[]> r(new float[static_cast<std::size_t>(n)]), c(new float[static_cast<std::size_t>(n)]);
  fill(r.get(), c.get(), n);
  const tdiff::Tensor tr = tdiff::Tensor::view(tdiff::DType::f32, {n}, r.get(), r);
  const tdiff::Tensor tc = tdiff::Tensor::view(tdiff::DType::f32, {n}, c.get(), c);

  std::uint64_t sink = 0;
  const double t_read = best_seconds(reps, [&] { sink ^= stream_read(r.get(), bytes) ^ stream_read(c.get(), bytes); });
  tdiff::TensorMetrics m;
  const double t_metrics = best_seconds(reps, [&] { m = tdiff::tensor_metrics(tr, tc); });

  const double total = 2.0 * static_cast<double>(bytes);
  const double bw = total / t_read / 1e9, gbps = total / t_metrics / 1e9;
  fmt::print("two float32 tensors of {:.2f} GiB ({} elements), {} threads, best of {}\n", gib, n,
             omp_get_max_threads(), reps);
  fmt::print("stream read     {:7.2f} GB/s  ({:.3f} s)   [checksum {:x}]\n", bw, t_read, sink & 0xFFFF);
  fmt::print("tdiff metrics   {:7.2f} GB/s  ({:.3f} s)   {:.0f}% of stream read\n", gbps, t_metrics, 100 * gbps / bw);
  fmt::print("values cosine={:.17g} max_abs={:.17g} rmse={:.17g} rel_l2={:.17g} max_rel={:.17g}\n", m.cosine,
             m.max_abs, m.rmse, m.rel_l2, m.max_rel);
  // The same data times 8 (exact in float): rms(r) = 2.3 > 1, so max_abs_scaled takes its
  // second pass (metrics.h).
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) r[i] *= 8.0f, c[i] *= 8.0f;
  const double t_scaled = best_seconds(reps, [&] { m = tdiff::tensor_metrics(tr, tc); });
  const double gbps_scaled = total / t_scaled / 1e9;
  fmt::print("tdiff metrics, rms(r) > 1 (second max_abs_scaled pass) {:7.2f} GB/s  ({:.3f} s)   "
             "{:.0f}% of stream read\n", gbps_scaled, t_scaled, 100 * gbps_scaled / bw);
  fmt::print("RESULT stream_gbps={:.3f} metrics_gbps={:.3f} metrics_s={:.4f} metrics_scaled_gbps={:.3f}\n", bw, gbps,
             t_metrics, gbps_scaled);
  return 0;
}
