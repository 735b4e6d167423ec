// Generation in steps against the cache (exec/step_run.h): the reference run step by step
// equals its own prefill to float64 rounding in every stage (model-spec §10.1: decode equals
// prefill), whatever the chunks and wherever the steps cross a window, an entry boundary or the
// ring's wrap; selections and masks bit for bit. And emu in steps stays within its formats'
// noise of the reference, as its prefill does.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "app/case_workflows.h"
#include "backend/executor.h"
#include "casefile/session.h"
#include "emu/emu_backend.h"
#include "exec/step_run.h"
#include "numerics/policy.h"
#include "refcpu/refcpu_backend.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

using Outputs = std::map<std::string, Tensor>;

// A folder of its own under the temp folder, removed at the end.
struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / fmt::format("tdiff-{}-{}", name, ::getpid())) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string path() const { return dir.string(); }
};

// A generation case on the tiny preset (W = 8, CSA rate 4, HCA rate 8): two rows of `len`
// tokens, the last `decode` decoded, the prompt in `chunks`.
std::string make_generation_case(const std::string& dir, std::int64_t len, std::int64_t decode,
                                 const std::vector<std::int64_t>& chunks) {
  const ModelConfig c = synth_preset("tiny");
  write_synth_model(c, 3, dir + "/model", {}, {});
  app::CaseRequest request;
  request.model_dir = dir + "/model";
  request.prompts = random_prompts(2, len, c.vocab_size, 11);
  request.decode = decode;
  request.chunks = chunks;
  const std::string path = dir + "/case.h5";
  app::make_case(request, path);
  return path;
}

Outputs run_on(CaseSession& session, Backend& backend, bool steps) {
  Outputs out;
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& t) {
    for (std::size_t k = 0; k < t.size(); ++k) out[s.name + "/" + s.outputs[k]] = t[k];
  };
  RunContext ctx = session.context();
  const auto on = [&](const Stage&) -> Backend& { return backend; };
  if (steps) {
    execute_steps(session.stages, session.info.schedule, on, ctx, hooks);
  } else {
    TensorMap env;
    put_inputs(session.info.batch, env);
    execute(session.stages, on, ctx, env, hooks);
  }
  return out;
}

// The largest |a − b| relative to max |b| (∞ at a shape or dtype mismatch; exact for integers).
double relative_difference(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.value(i), y = b.value(i);
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    diff = std::max(diff, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return diff / std::max(scale, 1e-300);
}

class GenerationSteps : public ::testing::TestWithParam<std::vector<std::int64_t>> {};

// Prompt 21 (≡ 1 mod 4), 19 decode steps: the steps cross CSA and HCA boundaries and wrap
// the 8-slot ring twice; the chunk splits end on, before and after window boundaries.
TEST_P(GenerationSteps, ReferenceStepsEqualItsPrefill) {
  TempDir tmp("steps-" + std::to_string(GetParam().size()));
  const std::string path = make_generation_case(tmp.path(), 40, 19, GetParam());
  CaseSession session = open_session(path);
  refcpu::RefCpuBackend ref;
  const Outputs prefill = run_on(session, ref, false), steps = run_on(session, ref, true);
  ASSERT_EQ(prefill.size(), steps.size());
  std::size_t float_tensors = 0;
  for (const auto& [key, want] : prefill) {
    const Tensor& got = steps.at(key);
    const double d = relative_difference(got, want);
    if (want.dtype() == DType::f64) {
      ++float_tensors;
      EXPECT_LE(d, 1e-12) << key << " " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
    } else {
      EXPECT_EQ(d, 0.0) << key << " " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
    }
  }
  EXPECT_GT(float_tensors, 100u);
}

INSTANTIATE_TEST_SUITE_P(Chunks, GenerationSteps,
                         ::testing::Values(std::vector<std::int64_t>{}, std::vector<std::int64_t>{5, 3, 13},
                                           std::vector<std::int64_t>{1, 7, 4, 9}, std::vector<std::int64_t>{20, 1}));

// emu in steps reads its own cache, in ring order: as close to the reference as its prefill
// is (within a factor of two in every float stage). Under fp32 storage the ring's summation
// order shows in the last bits; under bf16 storage (fixed) it rounds away on this model.
class GenerationStepsEmu : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerationStepsEmu, StepsStayWithinTheFormatsNoise) {
  TempDir tmp("steps-emu-" + GetParam());
  const std::string path = make_generation_case(tmp.path(), 40, 19, {5, 3, 13});
  CaseSession session = open_session(path);
  refcpu::RefCpuBackend ref;
  emu::EmuBackend emu(Policy::preset(GetParam()), 7);
  const Outputs want = run_on(session, ref, false), prefill = run_on(session, emu, false),
                steps = run_on(session, emu, true);
  std::size_t moved = 0, judged = 0;
  for (const auto& [key, w] : want) {
    if (w.dtype() != DType::f64) continue;
    const double dp = relative_difference(prefill.at(key), w), ds = relative_difference(steps.at(key), w);
    if (relative_difference(steps.at(key), prefill.at(key)) > 0) {
      ++moved;
      std::printf("%s: steps %.3g, prefill %.3g\n", key.c_str(), ds, dp);
    }
    ++judged;
    EXPECT_LE(ds, 2 * dp + 1e-6) << key;
  }
  EXPECT_GT(judged, 100u);
  if (GetParam() == "fp32") EXPECT_GT(moved, 0u) << "the ring's order should show in fp32";
}

INSTANTIATE_TEST_SUITE_P(Policies, GenerationStepsEmu, ::testing::Values("fixed", "fp32"));

}  // namespace
}  // namespace tdiff

namespace tdiff {
namespace {

// Greedy generation by the reference in steps (exec/greedy.h) picks, at every position, the
// argmax of the prefill's logits over the generated sequence: decode equals prefill.
TEST(GreedyGeneration, TokensAreThePrefillsArgmax) {
  TempDir tmp("greedy");
  const ModelConfig c = synth_preset("tiny");
  write_synth_model(c, 3, tmp.path() + "/model", {}, {});
  app::CaseRequest request;
  request.model_dir = tmp.path() + "/model";
  request.prompts = random_prompts(2, 21, c.vocab_size, 11);
  const PromptSet prompts = request.prompts;
  request.generate = 19;
  request.chunks = {5, 3, 13};
  std::int64_t told = 0;
  request.on_token = [&](std::int64_t done, std::int64_t total) {
    EXPECT_EQ(total, 19);
    told = done;
  };
  const std::string path = tmp.path() + "/case.h5";
  app::make_case(request, path);
  EXPECT_EQ(told, 19);
  CaseSession session = open_session(path);
  ASSERT_EQ(session.info.batch.seq(), 40);
  EXPECT_EQ(session.info.schedule.prompt, 21);
  refcpu::RefCpuBackend ref;
  const Outputs prefill = run_on(session, ref, false);
  const Tensor& logits = prefill.at("lm_head/logits");
  const auto V = logits.dim(2);
  const auto* ids = session.info.batch.ids.data<std::int64_t>();
  std::set<std::int64_t> distinct;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t p = 0; p < 21; ++p) EXPECT_EQ(ids[b * 40 + p], prompts.ids[b][p]) << "the prompt is kept";
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t p = 21; p < 40; ++p) {
      const double* row = logits.data<double>() + (b * 40 + p - 1) * V;
      EXPECT_EQ(ids[b * 40 + p], std::max_element(row, row + V) - row) << "row " << b << " position " << p;
      distinct.insert(ids[b * 40 + p]);
    }
  EXPECT_GT(distinct.size(), 3u);  // not one token repeated: the test can tell positions apart
}

}  // namespace
}  // namespace tdiff
