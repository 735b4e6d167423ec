// Every operator kind of the op table (model/op_table.h) on emu against refcpu, as ggml's
// test-backend-ops checks every operator on every backend against the CPU: on the tiny
// synthetic model, at awkward token counts (1, 13, 17, 257; batches of 2 padded on either
// side), random token ids from a seed derived from the test's name, each stage run on the
// reference's own inputs (built by refcpu on the same tokens). NaN/Inf first, then the error
// against what the policy's formats explain (diff/expected.h), for fp32 and fixed; and a
// coverage check that fails when an operator kind has no stage here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/executor.h"
#include "casefile/case_file.h"
#include "casefile/session.h"
#include "diff/compare.h"
#include "diff/expected.h"
#include "emu/emu_backend.h"
#include "numerics/policy.h"
#include "refcpu/refcpu_backend.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

// FNV-1a of the running test's full name: its seed, the same on every machine and run.
std::uint64_t seed_of_this_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : std::string(info->test_suite_name()) + "." + info->name()) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

struct Shape_ {
  const char* name;
  std::vector<std::int64_t> lengths;  // one prompt per batch row
  bool pad_left;
};

// 1 token (no window, no compressed entry), 13 and 17 (not multiples of the window or of
// either rate), 257 (past two KV blocks, one past a multiple of every rate), and batches of
// two whose shorter row is padded on the right or on the left.
const Shape_ kShapes[] = {
    {"t1", {1}, false},           {"t13", {13}, false},         {"t17", {17}, false},
    {"t257", {257}, false},       {"b2_right", {17, 13}, false}, {"b2_left", {1, 13}, true},
};

// The tiny model, written once per test process.
const std::string& tiny_model() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / fmt::format("tdiff-op-kinds-{}", ::getpid());
    fs::remove_all(d);
    write_synth_model(synth_preset("tiny"), 1, d.string());
    return d.string();
  }();
  return dir;
}

// A session on the tiny model with random prompts of `shape`, and the float64 reference of
// every stage (refcpu on the same inputs), keyed "<stage>/<tensor>" like the case inputs.
struct Bench {
  CaseSession session;
  TensorMap tensors;
};

Bench make_bench(const Shape_& shape, std::uint64_t seed) {
  Bench b;
  const ModelConfig tiny = synth_preset("tiny");
  PromptSet p;
  p.source = "op_kinds_test";
  for (std::size_t r = 0; r < shape.lengths.size(); ++r) {
    p.ids.push_back(random_prompts(1, shape.lengths[r], tiny.vocab_size, seed + r).ids[0]);
    p.lines.push_back("");
    p.line_no.push_back(static_cast<int>(r + 1));
  }
  b.session.info.config = tiny;
  b.session.info.batch = pad_prompts(p, 0, shape.pad_left, tiny.vocab_size);
  b.session.weights = std::make_unique<WeightStore>(tiny_model(), tiny);
  b.session.stages = build_stages(tiny);
  RunContext ctx = b.session.context();
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(b.session.info.batch, env);
  b.tensors = env;
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& out) {
    for (std::size_t k = 0; k < out.size(); ++k) b.tensors[s.name + "/" + s.outputs[k]] = out[k];
  };
  execute(b.session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
  return b;
}

// The first stage of every (kind, layer type) pair: each kind at each attention variant that
// has it (a CSA layer's pooling overlaps, an HCA layer's does not), without running them all.
std::vector<const Stage*> one_stage_per_variant(const std::vector<Stage>& stages) {
  std::set<std::pair<OpKind, LayerType>> seen;
  std::vector<const Stage*> picked;
  for (const Stage& s : stages)
    if (seen.insert({s.kind, s.layer_type}).second) picked.push_back(&s);
  return picked;
}

// Each picked stage on emu under `policy`, on the reference's inputs, compared and judged as
// bisect's isolation judges it (default thresholds, the tolerance rule on the expected error).
CompareResult isolated_on_emu(Bench& b, const std::vector<const Stage*>& picked, const Policy& policy) {
  emu::EmuBackend emu(policy, 1);
  RunContext ctx = b.session.context();
  CompareResult r;
  CompareOptions copt;
  for (const Stage& s : b.session.stages) copt.stage_order.push_back(s.name);
  r.locator = std::make_shared<const Locator>(b.session.stages, b.session.info.config, b.session.info.batch);
  for (const Stage* s : picked) {
    std::vector<const Tensor*> in;
    for (const TensorRef& t : s->inputs) in.push_back(&b.tensors.at(t.key()));
    const std::vector<Tensor> out = emu.run(*s, in, ctx);
    const Tensor* scores = s->kind == OpKind::idx_topk ? in.front() : nullptr;  // idx.topk reads idx.score first
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::string key = s->name + "/" + s->outputs[k];
      r.rows.push_back(diff_tensor(key, b.tensors.at(key), out[k], copt, scores));
    }
  }
  set_expected(r, {&b.session, &policy, StageInputs::reference, nullptr});
  judge(r, ThresholdPolicy{});
  return r;
}

class OpKinds : public ::testing::TestWithParam<Shape_> {};

TEST_P(OpKinds, EmuMatchesRefcpuWithinThePolicysExpectedError) {
  const std::uint64_t seed = seed_of_this_test();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  SCOPED_TRACE(fmt::format("reproduce: build/tests/unit_emu --gtest_filter='{}.{}'", info->test_suite_name(), info->name()));
  Bench b = make_bench(GetParam(), seed);
  const auto picked = one_stage_per_variant(b.session.stages);
  for (const char* preset : {"fp32", "fixed"}) {
    const CompareResult r = isolated_on_emu(b, picked, Policy::preset(preset));
    for (const TensorDiff& row : r.rows) {
      SCOPED_TRACE(fmt::format("{} under {}, {} tokens, seed {}", row.key(), preset, b.session.info.batch.seq(), seed));
      // NaN/Inf first: a non-finite value the reference does not have is wrong whatever its size.
      ASSERT_EQ(row.metrics.new_nonfinite, 0);
      EXPECT_EQ(row.verdict, Verdict::pass) << row.reason;
      // Every float tensor is judged against an expected error, and stays within it.
      if (row.kind == TensorKind::values || row.kind == TensorKind::logits) {
        ASSERT_TRUE(row.expected.has_value());
        EXPECT_LE(row.tolerance_ratio, ThresholdPolicy{}.defaults.expected_warn) << row.reason;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpKinds, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape_>& i) { return std::string(i.param.name); });

// Coverage: every kind of the op table has a stage the test above runs (the tiny model has
// sliding, CSA and HCA layers and both MoE kinds); a new kind the model does not build fails here.
TEST(OpKindsCoverage, EveryKindOfTheOpTableHasACase) {
  const auto stages = build_stages(synth_preset("tiny"));
  std::set<OpKind> covered;
  for (const Stage* s : one_stage_per_variant(stages)) covered.insert(s->kind);
  for (const OpInfo& op : op_table()) EXPECT_TRUE(covered.count(op.kind)) << op.name << " has no case";
}

}  // namespace
}  // namespace tdiff
