// Prefill benchmark of the hip backend on a case: the whole stage graph under a policy
// (default fixed), after one warm-up run that uploads and quantizes the weights. Reports the
// device time of every stage (events around each stage), the wall time of a run that copies
// every stage output to the host (all stages tapped) and of one that copies none, and their
// ratio (the capture overhead). Writes a JSON file with the numbers.
//
//   bench_hip CASE [--model DIR] [--policy fixed] [--set PATTERN:knob=value ...] [--runs 3] [--logit-blocks 4] [--copy-streams 2]
//             [-o bench_hip.json]
//   --hip-gemm vector: every GEMM on the vector ALU (emu's sums), as `tdiff run --hip-gemm`.
//   --untapped-only: only the untapped forwards (warm-up and --runs of them), nothing kept or
//   copied: a model whose captured outputs or kept run would not fit the device (43 layers at
//   4096 tokens), for the resident-against-streamed comparison.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "backend/executor.h"
#include "casefile/session.h"
#include "hip/hip_backend.h"

using namespace tdiff;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --untapped-only: the warm-up and `runs` forwards with no output copied, their times printed
// in the full run's words and written to `out`.
int untapped_only(CaseSession& session, hip::HipBackend& hip_b, const std::function<double(bool)>& run_once, int runs,
                  const std::string& case_path, const std::string& policy_label, const std::string& out) {
  const double warm = run_once(false);
  std::vector<double> none;
  for (int r = 0; r < runs; ++r) none.push_back(run_once(false));
  const auto env = hip_b.environment();
  std::printf("%s on %s (%s), %lld x %lld tokens, policy %s\n", case_path.c_str(), hip_b.device().name.c_str(),
              hip_b.device().arch.c_str(), static_cast<long long>(session.info.batch.rows()),
              static_cast<long long>(session.info.batch.seq()), policy_label.c_str());
  std::printf("GEMMs: %s\n", env.at("gpu_gemm").c_str());
  std::printf("warm-up (weights upload + quantization): %.1f ms\n", warm);
  std::printf("prefill, no stage tapped:                                 %.2f ms (median of %d)\n", median(none), runs);
  if (env.count("gpu_weights")) std::printf("weights: %s\n", env.at("gpu_weights").c_str());
  nlohmann::json j;
  j["case"] = case_path;
  j["device"] = hip_b.device().name;
  j["policy"] = policy_label;
  j["gemm"] = env.at("gpu_gemm");
  j["weights"] = env.count("gpu_weights") ? env.at("gpu_weights") : "";
  j["tokens"] = session.info.batch.rows() * session.info.batch.seq();
  j["warmup_ms"] = warm;
  j["prefill_untapped_ms"] = none;
  std::ofstream(out) << j.dump(1) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string case_path, model, policy_name = "fixed", out = "bench_hip.json";
  std::vector<std::string> sets;
  std::string hip_gemm = "matrix";
  int logit_blocks = 4, copy_streams = 2;
  bool forward_only = false;
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_hip: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    // A whole number in [lo, hi], or a one-line error (exit 2).
    auto integer = [&](int lo, int hi) {
      const std::string v = next();
      std::size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || v.empty() || n < lo || n > hi) {
        std::fprintf(stderr, "bench_hip: %s %s: expected a whole number from %d to %d\n", a.c_str(), v.c_str(), lo, hi);
        std::exit(2);
      }
      return n;
    };
    if (a == "--model") model = next();
    else if (a == "--policy") policy_name = next();
    else if (a == "--set") sets.push_back(next());
    else if (a == "--hip-gemm") hip_gemm = next();
    else if (a == "--runs") runs = integer(1, 100);
    else if (a == "--logit-blocks") logit_blocks = integer(1, 64);
    else if (a == "--copy-streams") copy_streams = integer(1, 2);
    else if (a == "-o") out = next();
    else if (a == "--untapped-only") forward_only = true;
    else case_path = a;
  }
  if (case_path.empty()) {
    std::fprintf(stderr, "usage: bench_hip CASE [--model DIR] [--policy fixed] [--set SPEC ...] [--hip-gemm matrix|vector] [--runs 3] [--logit-blocks 4] [--copy-streams 2] [--untapped-only] [-o out.json]\n");
    return 2;
  }
  try {
    CaseSession session = open_session(case_path, model);
    RunContext ctx = session.context();
    Policy policy = Policy::load(policy_name);
    for (const auto& spec : sets) policy.add_set(spec);
    policy.validate(session.stages);
    const std::string policy_label = policy.describe();
    if (hip_gemm != "matrix" && hip_gemm != "vector") {
      std::fprintf(stderr, "bench_hip: --hip-gemm must be matrix or vector\n");
      return 2;
    }
    hip::HipBackend hip_b(policy, 1);
    hip_b.set_matrix_cores(hip_gemm == "matrix");
    hip_b.set_logit_blocks(logit_blocks);
    hip_b.set_copy_streams(copy_streams);
    auto run_once = [&](bool capture) {
      hip_b.set_capture([capture](const Stage&) { return capture; });
      TensorMap env;
      put_inputs(session.info.batch, env);
      const auto t0 = std::chrono::steady_clock::now();
      execute(session.stages, [&](const Stage&) -> Backend& { return hip_b; }, ctx, env);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    if (forward_only) return untapped_only(session, hip_b, run_once, runs, case_path, policy_label, out);
    const std::size_t bytes0 = hip_b.captured_bytes();
    const double warm = run_once(true);  // uploads the weights, fills the device and pinned pools
    const double captured_gb = static_cast<double>(hip_b.captured_bytes() - bytes0) / 1e9;  // one tapped run
    std::vector<double> all, none;
    for (int r = 0; r < runs; ++r) {
      all.push_back(run_once(true));
      none.push_back(run_once(false));
    }
    // Compared on the device (determinism --on-device): one run kept as run 1, then runs
    // compared with it there and their comparison collected; nothing else crosses the link.
    auto snapshot = std::make_shared<hip::RunSnapshot>();
    hip_b.set_run_snapshot(snapshot, true);
    run_once(false);
    hip_b.set_run_snapshot(snapshot, false);
    std::vector<double> compared;
    std::int64_t compared_differing = 0;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run_once(false);
      for (const auto& d : snapshot->collect(nullptr)) compared_differing += d.differing;
      compared.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    hip_b.set_run_snapshot(nullptr, false);
    const double kept_gb = static_cast<double>(snapshot->kept_bytes()) / 1e9;
    snapshot.reset();
    // Per-stage device time in one more captured run.
    hip_b.set_timing(true);
    run_once(true);
    hip_b.set_timing(false);
    const auto per_stage = hip_b.stage_ms();
    const auto spans = hip_b.copy_spans();
    const double forward_end = hip_b.timed_forward_ms();
    hip_b.clear_timing();

    // The link's device-to-host rate: one pinned copy of 512 MiB (about the fp32 logits),
    // median of 3. No capture can beat captured bytes / rate, however well it overlaps.
    double link_gb_s = 0;
    {
      constexpr std::size_t kBytes = std::size_t{512} << 20;
      hip::DeviceBuffer dev(kBytes);
      void* host = hip::pinned_alloc(kBytes);
      hip::Stream st = hip::stream_create();
      std::vector<double> rates;
      for (int r = 0; r < 4; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        hip::copy_d2h(host, dev.get(), kBytes, st);
        hip::stream_sync(st);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) rates.push_back(static_cast<double>(kBytes) / 1e9 / s);  // the first copy warms up
      }
      hip::stream_destroy(st);
      hip::pinned_free(host);
      link_gb_s = median(rates);
    }

    std::map<std::string, double> by_class;
    double stage_sum = 0;
    std::printf("%-28s %10s\n", "stage", "device ms");
    for (const auto& [name, ms] : per_stage) {
      std::printf("%-28s %10.3f\n", name.c_str(), ms);
      stage_sum += ms;
      const auto dot = name.find('.');
      const bool layer = name.size() > 3 && name[0] == 'L' && dot == 3;
      by_class[layer ? name.substr(dot + 1) : name] += ms;
    }
    const double t_all = median(all), t_none = median(none);

    // The capture's timeline in the timed run: when the link was busy (the union of the copy
    // spans of both copy streams), idle between the first and the last copy, and the tail
    // after the last stage ended. What separates the tapped time from bytes / link rate.
    double busy = 0, first = 0, last = 0;
    std::size_t span_bytes = 0;
    if (!spans.empty()) {
      std::vector<std::pair<double, double>> iv;
      for (const auto& c : spans) iv.emplace_back(c.start_ms, c.end_ms), span_bytes += c.bytes;
      std::sort(iv.begin(), iv.end());
      first = iv.front().first;
      double a = iv.front().first, b = iv.front().second;
      for (const auto& [x, y] : iv) {
        if (x > b) busy += b - a, a = x;
        b = std::max(b, y);
      }
      busy += b - a;
      last = b;
    }
    std::printf("\nby stage class (summed over layers):\n");
    for (const auto& [cls, ms] : by_class) std::printf("  %-26s %10.3f ms\n", cls.c_str(), ms);
    std::printf("\n%s on %s (%s), %lld x %lld tokens, policy %s\n", case_path.c_str(), hip_b.device().name.c_str(),
                hip_b.device().arch.c_str(), static_cast<long long>(session.info.batch.rows()),
                static_cast<long long>(session.info.batch.seq()), policy_label.c_str());
    const auto env = hip_b.environment();
    std::printf("GEMMs: %s\n", env.at("gpu_gemm").c_str());
    std::printf("warm-up (weights upload + quantization): %.1f ms\n", warm);
    std::printf("prefill, all stages tapped (outputs copied to the host): %.2f ms (median of %d)\n", t_all, runs);
    std::printf("prefill, no stage tapped:                                 %.2f ms (median of %d)\n", t_none, runs);
    std::printf("capture overhead: %.3fx; sum of per-stage device times %.2f ms\n", t_all / t_none, stage_sum);
    std::printf("captured per tapped run: %.2f GB of outputs as stored (float32, int64, bool) (%.1f GB/s over the extra time)\n",
                captured_gb, captured_gb / ((t_all - t_none) / 1e3));
    const double floor_ms = captured_gb / link_gb_s * 1e3;
    std::printf("device-to-host link: %.1f GB/s (one pinned 512 MiB copy): copying %.2f GB takes at least %.1f ms, "
                "%.3fx the untapped forward; the tapped run reached %.1f GB/s\n",
                link_gb_s, captured_gb, floor_ms, floor_ms / t_none, captured_gb / (t_all / 1e3));
    // Issue 22's capture target: a fully tapped forward within 1.10x of what it cannot beat,
    // the copies' own time on this link measured in this run, or the untapped forward where
    // that is longer (a compute-bound forward hides its copies).
    const double bound_ms = std::max(floor_ms, t_none);
    std::printf("capture target: the tapped run took %.3fx max(link floor %.1f ms, untapped forward %.1f ms) (target <= 1.10x)\n",
                t_all / bound_ms, floor_ms, t_none);
    // Issue 22's on-device target: runs compared only with other runs, compared on the
    // device, within 1.10x of the untapped forward.
    const double t_cmp = median(compared);
    std::printf("compared on the device (determinism --on-device): %.2f ms (median of %d) = %.3fx the untapped forward "
                "(target <= 1.10x); run 1 kept: %.2f GB on the device; %lld elements differed over the compared runs\n",
                t_cmp, runs, t_cmp / t_none, kept_gb, static_cast<long long>(compared_differing));
    if (env.count("gpu_weights")) std::printf("weights: %s\n", env.at("gpu_weights").c_str());
    if (!spans.empty()) {
      const double gb = static_cast<double>(span_bytes) / 1e9;
      std::printf("capture timeline (timed run, ms from the first stage): forward ends %.2f; %zu copies, first starts "
                  "%.2f, last ends %.2f (tail %.2f after the forward); link busy %.2f ms (%.1f GB/s while busy), "
                  "idle %.2f ms between the first and the last copy\n",
                  forward_end, spans.size(), first, last, last - forward_end, busy, gb / (busy / 1e3),
                  (last - first) - busy);
    }

    nlohmann::json j;
    j["tapped_over_bound"] = t_all / bound_ms;  // the capture target: <= 1.10
    j["weights"] = env.count("gpu_weights") ? env.at("gpu_weights") : "";
    j["logit_blocks"] = logit_blocks;
    j["copy_streams"] = copy_streams;
    j["capture_timeline"] = {{"forward_end_ms", forward_end}, {"copies", spans.size()}, {"first_copy_ms", first},
                             {"last_copy_end_ms", last}, {"link_busy_ms", busy},
                             {"gb", static_cast<double>(span_bytes) / 1e9}};
    j["case"] = case_path;
    j["device"] = hip_b.device().name;
    j["arch"] = hip_b.device().arch;
    j["policy"] = policy_label;
    j["gemm"] = env.at("gpu_gemm");
    j["tokens"] = session.info.batch.rows() * session.info.batch.seq();
    j["warmup_ms"] = warm;
    j["prefill_all_tapped_ms"] = all;
    j["prefill_untapped_ms"] = none;
    j["compared_on_device_ms"] = compared;
    j["compared_on_device_vs_untapped"] = t_cmp / t_none;
    j["capture_overhead"] = t_all / t_none;
    j["captured_gb_per_run"] = captured_gb;
    j["d2h_link_gb_per_s"] = link_gb_s;
    j["capture_floor_ms"] = floor_ms;
    j["stage_device_ms"] = per_stage;
    j["class_device_ms"] = by_class;
    std::ofstream(out) << j.dump(1) << "\n";
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench_hip: error: %s\n", e.what());
    return 2;
  }
}
