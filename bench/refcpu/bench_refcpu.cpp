// bench/refcpu: one forward of a model through the float64 reference (a preset written to a
// temporary folder, or an existing model folder in either layout). Prints GFLOP/s of the
// matmul-heavy stages and of the whole forward, each as a fraction of this machine's best
// DGEMM (OpenBLAS on all threads, Eigen's beside it) measured in the same run (target: the
// matmul-heavy stages at >= 50% of it), and the seconds of every other stage class.
//   build/bench/refcpu/bench_refcpu [--tokens 512] [--preset small | --model DIR] [--passes P]
#include <omp.h>

#include <cblas.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "backend/executor.h"
#include "base/runtime_env.h"
#include "synth/synth.h"
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
    case OpKind::attention: {  // q·K and p·V over each token's visible keys (one prompt of N tokens)
      double keys = 0;
      const auto rate = c.rate(s.layer_type);
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(N); ++i) {
        keys += static_cast<double>(std::min(i + 1, c.sliding_window));
        if (rate > 0) {
          const auto entries = (i + 1) / rate;
          keys += static_cast<double>(s.layer_type == LayerType::csa ? std::min(entries, c.index_topk) : entries);
        }
      }
      return 4.0 * static_cast<double>(c.num_attention_heads * c.head_dim) * keys;
    }
    case OpKind::idx_score: {  // q_h·k_w over the causal entries
      double entries = 0;
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(N); ++i) entries += static_cast<double>((i + 1) / s.rate);
      return 2.0 * static_cast<double>(c.index_n_heads * c.index_head_dim) * entries;
    }
    default: return 0;
  }
}

// A square DGEMM on all threads, best of 3: OpenBLAS (the best this machine does) or Eigen.
double dgemm_gflops(std::int64_t n, bool openblas) {
  Eigen::setNbThreads(omp_get_max_threads());
  Eigen::MatrixXd a = Eigen::MatrixXd::Random(n, n), b = Eigen::MatrixXd::Random(n, n), c(n, n);
  const int N = static_cast<int>(n);
  auto product = [&] {
    if (openblas)
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, a.data(), N, b.data(), N, 0.0, c.data(), N);
    else
      c.noalias() = a * b;
  };
  product();  // warm-up
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    product();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  Eigen::setNbThreads(1);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_runtime_env(argv);  // the OpenBLAS kernels and idle policy tdiff itself runs with
  std::int64_t tokens = 512;
  std::string preset = "small", model;
  int passes = 0;  // default: 2 for a preset, 1 for a model folder
  for (int i = 1; i < argc; i += 2) {
    const bool known = !std::strcmp(argv[i], "--tokens") || !std::strcmp(argv[i], "--preset") ||
                       !std::strcmp(argv[i], "--model") || !std::strcmp(argv[i], "--passes");
    if (!known || i + 1 >= argc) {
      fmt::print(stderr, "usage: bench_refcpu [--tokens N] [--preset NAME | --model DIR] [--passes P]\n");
      return 2;
    }
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    if (!std::strcmp(argv[i], "--passes")) passes = std::stoi(argv[i + 1]);
  }
  const fs::path tmp = fs::temp_directory_path() / fmt::format("tdiff-bench-refcpu-{}", ::getpid());
  const ModelConfig c = model.empty() ? synth_preset(preset) : load_config(model + "/config.json");
  if (model.empty()) write_synth_model(c, 1, tmp.string());
  const std::string dir = model.empty() ? tmp.string() : model;
  WeightStore weights(dir, c);
  Tensor ids(DType::i64, {1, tokens}), mask(DType::u8, {1, tokens});
  for (std::int64_t i = 0; i < tokens; ++i) {
    ids.data<std::int64_t>()[i] = (i * 7919 + 13) % c.vocab_size;
    mask.data<std::uint8_t>()[i] = 1;
  }
  const Batch batch = Batch::make(ids, mask, c.vocab_size, "bench");
  const auto stages = build_stages(c);
  refcpu::RefCpuBackend ref;
  RunContext ctx{c, weights, batch, TieRule::lowest_index};

  // A preset's forward runs twice and the second is timed (its small weights then converted
  // once, as in a bisect's mixed runs); a model folder's once, as `tdiff golden` runs it. The
  // last of --passes P is timed.
  if (passes <= 0) passes = model.empty() ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
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
    if (pass + 1 < passes) continue;

    const double best = dgemm_gflops(2048, true), eigen = dgemm_gflops(1024, false);
    const auto spec = expected_weights(c);
    std::map<std::string, std::pair<double, double>> by_class, others;  // class -> (flops, seconds)
    double mm_flops = 0, mm_secs = 0;
    for (const auto& s : stages) {
      const double f = stage_flops(s, spec, c, static_cast<double>(tokens));
      auto& [cf, cs] = (f == 0 ? others : by_class)[s.op_class];
      cf += f, cs += secs[s.name];
      if (f > 0) mm_flops += f, mm_secs += secs[s.name];
    }
    fmt::print("bench/refcpu: {}, {} layers, {} tokens, {} threads; DGEMM on all threads: OpenBLAS ({}) {:.1f} GFLOP/s "
               "(2048^3), Eigen {:.1f} GFLOP/s (1024^3)\n",
               model.empty() ? "preset " + preset : model, c.num_hidden_layers, tokens, omp_get_max_threads(),
               openblas_get_corename(), best, eigen);
    fmt::print("{:<22} {:>10} {:>10} {:>9} {:>9}\n", "stage class", "GFLOP", "ms", "GFLOP/s", "of DGEMM");
    auto row = [&](const std::string& what, double flops, double secs_) {
      fmt::print("{:<22} {:>10.3f} {:>10.2f} {:>9.2f} {:>8.0f}%\n", what, flops / 1e9, secs_ * 1e3, flops / secs_ / 1e9,
                 100 * flops / secs_ / 1e9 / best);
    };
    for (const auto& [cls, v] : by_class) row(cls, v.first, v.second);
    row("matmul-heavy (all)", mm_flops, mm_secs);
    for (const auto& [cls, v] : others)
      if (v.second > 0.01 * total) fmt::print("{:<22} {:>10} {:>10.2f}\n", cls, "-", v.second * 1e3);
    row("whole forward", mm_flops, total);
  }
  if (model.empty()) fs::remove_all(tmp);
  return 0;
}
