// bench_gemm (device): the hip GEMM kernels on v4-flash-dims shapes, side by side in one
// process: the pipelined matrix-core kernel (both operands as 16-bit patterns: what the
// backend runs), the register-staged matrix-core kernel (float32 activations), and the
// vector ALU (emu's bits); the pipelined kernel also with each tile height (32, 64, 128
// rows) and 32- or 64-deep LDS stages (the first line is what the shape gets by default). Prints the median of --runs launches per kernel and shape, with
// TFLOPS and the weight bytes read per second. Usage: bench_gemm [--runs N] [--only SHAPE]
// (only the shapes whose name contains SHAPE, e.g. "experts").
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hip/device.h"
#include "hip/gemm.h"

namespace {

using namespace tdiff;
using arith::Fmt;

struct Shape {
  const char* name;
  std::int64_t M, K, O;
  std::int64_t experts = 0, picks = 0;  // routed: M tokens x picks slots over `experts` groups
};

// bf16-representable pseudo-random values in [-1, 1) from a multiplicative hash (the
// timings do not depend on the values; billions of them must be quick to make).
std::vector<float> random_bf16(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t h = (static_cast<std::uint64_t>(i) + seed * 0x9e3779b97f4a7c15ull) * 0xd6e8feb86659fd93ull;
    v[static_cast<std::size_t>(i)] = arith::round_fmt(static_cast<float>(h >> 40) / 8388608.0f - 1.0f, Fmt::bf16);
  }
  return v;
}

template <class T>
hip::DeviceBuffer upload(const std::vector<T>& h, hip::Stream s) {
  hip::DeviceBuffer d(std::max<std::size_t>(1, h.size()) * sizeof(T));
  hip::copy_h2d(d.get(), h.data(), h.size() * sizeof(T), s);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::string only;  // run only the shapes whose name contains this (e.g. for a profiler)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "bench_gemm: error: unknown argument '%s' (usage: bench_gemm [--runs N] [--only SHAPE])\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    const auto info = hip::device_init();
    hip::Stream s = hip::stream_create();
    std::printf("%s (%s), median of %d launches\n", info.name.c_str(), info.arch.c_str(), runs);
    std::printf("%-22s %-34s %9s %8s %9s\n", "shape", "kernel", "ms", "TFLOPS", "w GB/s");
    const Shape shapes[] = {
        {"lm_head 1024x4096>129280", 1024, 4096, 129280},
        {"dense 1024x4096>4096", 1024, 4096, 4096},
        // v4's narrow products: o_b, the shared expert's gate (and up), q_a, kv, the router.
        {"o_b 1024x8192>4096", 1024, 8192, 4096},
        {"shared 1024x4096>2048", 1024, 4096, 2048},
        {"q_a 1024x4096>1024", 1024, 4096, 1024},
        {"kv 1024x4096>512", 1024, 4096, 512},
        {"router 1024x4096>256", 1024, 4096, 256},
        // 64 experts and 256 tokens: the 24 rows per expert of v4's 256 experts at 1024
        // tokens, and 2.1 / 1.1 GB of weights, far beyond the caches, as there.
        {"experts gate|up", 256, 4096, 4096, 64, 6},
        {"experts down", 256, 2048, 4096, 64, 6},
    };
    for (const Shape& sh : shapes) {
      if (!only.empty() && std::string(sh.name).find(only) == std::string::npos) continue;
      const bool routed = sh.experts > 0;
      const std::int64_t groups = routed ? sh.experts : 1;
      const std::int64_t slots = routed ? sh.M * sh.picks : sh.M;
      const auto x = random_bf16(sh.M * sh.K, 1);
      const auto w = random_bf16(groups * sh.O * sh.K, 2);
      hip::DeviceBuffer d_x = upload(x, s), d_w = upload(w, s), d_y(static_cast<std::size_t>(slots * sh.O) * 4);
      hip::DeviceBuffer d_x16(static_cast<std::size_t>(sh.M * sh.K) * 2), d_w16(w.size() * 2);
      hip::pack_bits16(d_x.as<float>(), d_x16.as<std::uint16_t>(), sh.M * sh.K, Fmt::bf16, s);
      hip::pack_bits16(d_w.as<float>(), d_w16.as<std::uint16_t>(), static_cast<std::int64_t>(w.size()), Fmt::bf16, s);
      // Routed: every token picks `picks` distinct experts at random; slots listed per expert.
      hip::GemmGroups g;
      std::int64_t max_rows = sh.M;
      hip::DeviceBuffer d_rows(4), d_starts(4);
      if (routed) {
        std::mt19937_64 rng(3);
        std::vector<std::vector<std::int32_t>> per(static_cast<std::size_t>(sh.experts));
        for (std::int64_t t = 0; t < sh.M; ++t) {
          std::vector<std::int64_t> picked;
          while (static_cast<std::int64_t>(picked.size()) < sh.picks) {
            const auto e = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(sh.experts));
            if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
          }
          for (std::int64_t k = 0; k < sh.picks; ++k) {
            const auto e = static_cast<std::size_t>(picked[static_cast<std::size_t>(k)]);
            per[e].push_back(static_cast<std::int32_t>(t * sh.picks + k));
          }
        }
        std::vector<std::int32_t> rows, starts{0};
        max_rows = 0;
        for (const auto& p : per) {
          rows.insert(rows.end(), p.begin(), p.end());
          starts.push_back(static_cast<std::int32_t>(rows.size()));
          max_rows = std::max<std::int64_t>(max_rows, static_cast<std::int64_t>(p.size()));
        }
        d_rows = upload(rows, s), d_starts = upload(starts, s);
        g.count = sh.experts, g.w_stride = sh.O * sh.K, g.d_rows = d_rows.as<std::int32_t>();
        g.d_starts = d_starts.as<std::int32_t>(), g.a_div = static_cast<std::int32_t>(sh.picks), g.y_rows = slots;
      }
      const double flops = 2.0 * double(slots) * double(sh.K) * double(sh.O);
      const double w_bytes = double(groups) * double(sh.O) * double(sh.K) * 2;
      struct Variant {
        const char* name;
        hip::GemmInput x;
        hip::GemmWeight w;
        bool matrix_cores;
        int tile_rows = 0, tile_k = 0;
      };
      const hip::GemmInput x16(d_x16.as<std::uint16_t>());
      const hip::GemmWeight w16(d_w16.as<std::uint16_t>());
      const Variant variants[] = {
          {"matrix cores, pipelined (16-bit x, w)", x16, w16, true},
          {"  the same, 32-row tiles", x16, w16, true, 32},
          {"  the same, 64-row tiles", x16, w16, true, 64},
          {"  the same, 128-row tiles", x16, w16, true, 128},
          {"  32-row tiles, 64-deep stages", x16, w16, true, 32, 64},
          {"  64-row tiles, 64-deep stages", x16, w16, true, 64, 64},
          {"  128-row tiles, 64-deep stages", x16, w16, true, 128, 64},
          {"matrix cores, float32 x, 16-bit w", hip::GemmInput(d_x.as<float>()),
           hip::GemmWeight(d_w16.as<std::uint16_t>()), true},
          {"vector ALU (emu's bits)", hip::GemmInput(d_x.as<float>()), hip::GemmWeight(d_w.as<float>()), false},
      };
      for (const Variant& v : variants) {
        const hip::GemmSpec spec{Fmt::bf16, Fmt::f32, Fmt::bf16, false, v.matrix_cores};
        hip::GemmGroups gv = g;
        gv.tile_rows = v.tile_rows, gv.tile_k = v.tile_k;
        auto launch = [&] { hip::gemm(v.x, sh.K, v.w, d_y.as<float>(), sh.O, max_rows, sh.K, sh.O, spec, s, gv); };
        launch();  // warm-up
        std::vector<float> ms;
        for (int r = 0; r < runs; ++r) {
          hip::Event a = hip::event_create(), b = hip::event_create();
          hip::event_record(a, s);
          launch();
          hip::event_record(b, s);
          hip::event_sync(b);
          ms.push_back(hip::event_ms(a, b));
          hip::event_destroy(a), hip::event_destroy(b);
        }
        std::sort(ms.begin(), ms.end());
        const double t = ms[ms.size() / 2];
        std::printf("%-22s %-34s %9.3f %8.1f %9.0f\n", sh.name, v.name, t, flops / t / 1e9, w_bytes / t / 1e6);
      }
      hip::stream_sync(s);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: error: %s\n", e.what());
    return 1;
  }
}
