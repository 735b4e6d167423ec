// bench/refcpu: one forward of the `small` preset at 512 tokens through the float64
// reference. Prints GFLOP/s of the matmul-heavy stages and of the whole forward, each as a
// fraction of this machine's Eigen DGEMM rate measured in the same run (target: the
// matmul-heavy stages at >= 50% of DGEMM).
//   build/bench/refcpu/bench_refcpu [--tokens 512] [--preset small]
#include <omp.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/executor.h"
#include "core/synth.h"
#include "refcpu/refcpu_backend.h"

using namespace tdiff;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Floating-point operations of a stage, from its weights' shapes (a multiply-add counts 2;
// the grouped o_a projection is block-diagonal, so its flops are those of its weight too);
// 0 for stages that are not matrix products.
double stage_flops(const Stage& s, const std::map<std::string, WeightSpec>& spec, const ModelConfig& c, double N) {
  auto numel = [&](std::size_t i) { return static_cast<double>(shape_numel(spec.at(s.weights.at(i)).shape)); };
  switch (s.kind) {
    case OpKind::linear: case OpKind::lm_head: case OpKind::idx_weights: case OpKind::router:
    case OpKind::grouped_linear: case OpKind::hc_mix:
      return 2 * N * numel(0);
    case OpKind::cmp_proj: return 2 * N * (numel(0) + numel(1));
    case OpKind::moe_shared: return 2 * N * (numel(0) + numel(1) + numel(2));
    case OpKind::moe_experts:  // K of the E experts per token
      return 2 * N * static_cast<double>(c.num_experts_per_tok) * (numel(0) + numel(1)) / static_cast<double>(c.n_routed_experts);
    default: return 0;
  }
}

// Eigen's own DGEMM on all threads: the best this machine does with the same library.
double dgemm_gflops(std::int64_t n) {
  Eigen::setNbThreads(omp_get_max_threads());
  Eigen::MatrixXd a = Eigen::MatrixXd::Random(n, n), b = Eigen::MatrixXd::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    c.noalias() = a * b;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  Eigen::setNbThreads(1);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t tokens = 512;
  std::string preset = "small";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
  }
  const ModelConfig c = synth_preset(preset);
  const fs::path dir = fs::temp_directory_path() / fmt::format("tdiff-bench-refcpu-{}", ::getpid());
  write_synth_model(c, 1, dir.string());
  WeightStore weights(dir.string(), c);
  Tensor ids(DType::i64, {1, tokens}), mask(DType::u8, {1, tokens});
  for (std::int64_t i = 0; i < tokens; ++i) {
    ids.data<std::int64_t>()[i] = (i * 7919 + 13) % c.vocab_size;
    mask.data<std::uint8_t>()[i] = 1;
  }
  const Batch batch = Batch::make(ids, mask, c.vocab_size, "bench");
  const auto stages = build_stages(c);
  refcpu::RefCpuBackend ref;
  RunContext ctx{c, weights, batch, TieRule::lowest_index};

  // Warm-up run (weights converted to float64 once, caches filled), then the timed run.
  for (int pass = 0; pass < 2; ++pass) {
    TensorMap env;
    put_inputs(batch, env);
    std::map<std::string, double> secs;
    auto last = Clock::now();
    const auto t0 = last;
    ExecutorHooks hooks;
    hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>&) {
      const auto now = Clock::now();
      secs[s.name] = std::chrono::duration<double>(now - last).count();
      last = now;
    };
    execute(stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    if (pass == 0) continue;

    const double dgemm = dgemm_gflops(1024);
    const auto spec = expected_weights(c);
    std::map<std::string, std::pair<double, double>> by_class;  // class -> (flops, seconds)
    double mm_flops = 0, mm_secs = 0;
    for (const auto& s : stages) {
      const double f = stage_flops(s, spec, c, static_cast<double>(tokens));
      if (f == 0) continue;
      auto& [cf, cs] = by_class[s.op_class];
      cf += f, cs += secs[s.name];
      mm_flops += f, mm_secs += secs[s.name];
    }
    fmt::print("bench/refcpu: preset {}, {} tokens, {} threads; Eigen DGEMM (1024^3, all threads) {:.1f} GFLOP/s\n",
               preset, tokens, omp_get_max_threads(), dgemm);
    fmt::print("{:<22} {:>10} {:>10} {:>9} {:>9}\n", "stage class", "GFLOP", "ms", "GFLOP/s", "of DGEMM");
    for (const auto& [cls, v] : by_class)
      fmt::print("{:<22} {:>10.3f} {:>10.2f} {:>9.2f} {:>8.0f}%\n", cls, v.first / 1e9, v.second * 1e3,
                 v.first / v.second / 1e9, 100 * v.first / v.second / 1e9 / dgemm);
    fmt::print("{:<22} {:>10.3f} {:>10.2f} {:>9.2f} {:>8.0f}%\n", "matmul-heavy (all)", mm_flops / 1e9, mm_secs * 1e3,
               mm_flops / mm_secs / 1e9, 100 * mm_flops / mm_secs / 1e9 / dgemm);
    fmt::print("{:<22} {:>10.3f} {:>10.2f} {:>9.2f} {:>8.0f}%\n", "whole forward", mm_flops / 1e9, total * 1e3,
               mm_flops / total / 1e9, 100 * mm_flops / total / 1e9 / dgemm);
  }
  fs::remove_all(dir);
  return 0;
}
