// The operator table (model/op_table.h): a row per kind, the families the backends' handler
// files follow, the lists derived from it equal to the hand-kept lists they replaced, stage
// names resolving to their kinds, and the GPU test files' "// covers:" lines agreeing with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fnmatch.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model/op_table.h"
#include "numerics/policy.h"
#include "model/stage_names.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

using K = OpKind;

std::set<OpKind> where(bool (*pred)(const OpInfo&)) {
  const auto v = op_kinds_where(pred);
  return {v.begin(), v.end()};
}

std::set<std::string> names(const std::set<OpKind>& kinds) {
  std::set<std::string> out;
  for (OpKind k : kinds) out.insert(op_kind_name(k));
  return out;
}

TEST(OpTable, EveryKindHasItsRowInOrder) {
  ASSERT_EQ(op_table().size(), kOpKindCount);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < kOpKindCount; ++i) {
    const OpInfo& op = op_table()[i];
    EXPECT_EQ(static_cast<std::size_t>(op.kind), i);
    EXPECT_STREQ(op_kind_name(op.kind), op.name);
    EXPECT_TRUE(seen.insert(op.name).second) << op.name;
  }
  EXPECT_STREQ(op_kind_name(K::embed), "embed");
  EXPECT_STREQ(op_kind_name(K::lm_head), "lm_head");
}

TEST(OpTable, FamiliesAsTheHandlerFilesExpect) {
  const std::map<std::string, std::set<std::string>> expected = {
      {"embedding", {"embed"}},
      {"hyper_connection", {"hc_expand", "hc_mix", "hc_sinkhorn", "hc_pre", "hc_post", "hc_head"}},
      {"rope", {"rope_table", "rope", "entry_rope", "rope_inverse"}},
      {"mask", {"window_mask", "cmp_mask"}},
      {"norm", {"rms_norm", "head_rms_norm"}},
      {"linear", {"linear", "grouped_linear", "lm_head"}},
      {"compressor", {"cmp_proj", "pool"}},
      {"indexer", {"idx_weights", "idx_score", "idx_topk"}},
      {"attention", {"attention"}},
      {"moe", {"router", "moe_select", "moe_weights", "moe_experts", "moe_shared", "add"}},
  };
  std::map<std::string, std::set<std::string>> got;
  for (const OpInfo& op : op_table()) got[op_family_name(op.family)].insert(op.name);
  EXPECT_EQ(got, expected);
}

TEST(OpTable, SelectionsAreTheExpertAndIndexerChoices) {
  EXPECT_EQ(where([](const OpInfo& op) { return op.selection; }), (std::set<OpKind>{K::moe_select, K::idx_topk}));
  EXPECT_EQ(where([](const OpInfo& op) { return op.output == TensorKind::routing; }),
            (std::set<OpKind>{K::moe_select, K::idx_topk}));
  EXPECT_EQ(where([](const OpInfo& op) { return op.output == TensorKind::logits; }), (std::set<OpKind>{K::lm_head}));
  EXPECT_EQ(where([](const OpInfo& op) { return op.output == TensorKind::exact; }),
            (std::set<OpKind>{K::window_mask, K::cmp_mask}));
}

// The lists the table replaced, as they were written by hand before it.
TEST(OpTable, DerivedListsEqualTheOldHandKeptOnes) {
  const std::set<OpKind> old_gemm = {K::linear, K::grouped_linear, K::cmp_proj, K::idx_weights, K::moe_experts,
                                     K::moe_shared};
  const std::set<OpKind> old_reduction = {K::linear,      K::grouped_linear, K::cmp_proj, K::idx_weights, K::router,
                                          K::moe_experts, K::moe_shared,     K::lm_head};
  std::set<OpKind> old_compute;
  for (std::size_t k = 0; k < kOpKindCount; ++k) old_compute.insert(static_cast<OpKind>(k));
  for (OpKind k : {K::window_mask, K::cmp_mask, K::moe_select, K::idx_topk}) old_compute.erase(k);
  const std::set<OpKind> old_flat_tokens = {K::router, K::moe_select, K::moe_weights, K::moe_experts, K::moe_shared};

  EXPECT_EQ(names(where([](const OpInfo& op) { return op.gemm; })), names(old_gemm));
  EXPECT_EQ(names(where([](const OpInfo& op) { return op.split_k; })), names(old_reduction));
  EXPECT_EQ(names(where([](const OpInfo& op) { return op.compute(); })), names(old_compute));
  EXPECT_EQ(names(where([](const OpInfo& op) { return op.layout == RowLayout::flat_tokens; })), names(old_flat_tokens));
  // row_slice's old switch.
  EXPECT_EQ(where([](const OpInfo& op) { return op.layout == RowLayout::query_key; }), (std::set<OpKind>{K::window_mask}));
  EXPECT_EQ(where([](const OpInfo& op) { return op.layout == RowLayout::query_entry; }),
            (std::set<OpKind>{K::cmp_mask, K::idx_score}));
  EXPECT_EQ(where([](const OpInfo& op) { return op.layout == RowLayout::selected_ids; }), (std::set<OpKind>{K::idx_topk}));

  // The knob catalogue reads them.
  auto kinds = [](const char* knob) {
    const auto& v = knob_info(knob).kinds;
    return std::set<OpKind>(v.begin(), v.end());
  };
  EXPECT_EQ(kinds("matmul_input"), old_gemm);
  EXPECT_EQ(kinds("matmul_accum"), old_gemm);
  EXPECT_EQ(kinds("reduction"), old_reduction);
  EXPECT_EQ(kinds("storage"), old_compute);
}

bool old_glob(const std::vector<std::string>& patterns, const std::string& stage, const std::string& tensor) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), stage.c_str(), 0) == 0 || fnmatch(p.c_str(), (stage + "/" + tensor).c_str(), 0) == 0)
      return true;
  return false;
}

// Every stage of the synthetic presets resolves by name to its kind, layer and part; the
// tensor kinds equal what compare's globs gave, and the class what the old stage_class() cut.
TEST(StageNames, EveryStageResolvesAsTheOldNameRulesSaid) {
  const std::vector<std::string> old_logits = {"lm_head/*", "*/logits", "logits"};
  const std::vector<std::string> old_routing = {"*.moe.select/*", "*.attn.idx.topk/*"};
  for (const char* preset : {"tiny", "small"}) {
    const auto stages = build_stages(synth_preset(preset));
    for (const Stage& s : stages) {
      SCOPED_TRACE(s.name);
      const auto n = parse_stage_name(s.name);
      ASSERT_TRUE(n.has_value());
      EXPECT_EQ(n->kind, s.kind);
      EXPECT_EQ(n->layer, s.layer);
      EXPECT_EQ(s.op_class, s.layer >= 0 ? s.name.substr(s.name.find('.') + 1) : s.name);
      const bool old_tail = s.name.starts_with("final.") || s.name.starts_with("lm_head");
      const ModelPart old_part = s.layer >= 0 ? ModelPart::layers : old_tail ? ModelPart::head : ModelPart::prologue;
      EXPECT_EQ(stage_part(s.name), old_part);
      for (const auto& t : s.outputs) {
        const TensorKind old = old_glob(old_routing, s.name, t)  ? TensorKind::routing
                               : old_glob(old_logits, s.name, t) ? TensorKind::logits
                                                                 : TensorKind::values;
        const TensorKind now = op_info(s.kind).output == TensorKind::exact ? TensorKind::values : op_info(s.kind).output;
        EXPECT_EQ(now, old) << t;  // masks were "exact" by their integer dtype, as they still are
      }
    }
  }
}

TEST(StageNames, OtherNamesFallBackToTheNameRules) {
  EXPECT_FALSE(parse_stage_name("logits").has_value());
  EXPECT_FALSE(parse_stage_name("inputs").has_value());
  EXPECT_FALSE(parse_stage_name("L03.attn.nothing").has_value());
  EXPECT_EQ(parse_stage_name("L117.moe.select")->layer, 117);
  EXPECT_EQ(parse_stage_name("L117.moe.select")->kind, K::moe_select);
  EXPECT_EQ(stage_part("logits"), ModelPart::head);
  EXPECT_EQ(stage_part("final.other"), ModelPart::head);
  EXPECT_EQ(stage_part("inputs"), ModelPart::prologue);
  EXPECT_EQ(stage_part("L07.other"), ModelPart::layers);
  EXPECT_EQ(stage_layer("L07.other"), 7);
  EXPECT_EQ(stage_layer("Lx.other"), -1);
}

// "// covers: a, b" of every tests/gpu file.
std::map<std::string, std::set<std::string>> gpu_test_covers() {
  std::map<std::string, std::set<std::string>> out;
  const std::filesystem::path dir = std::filesystem::path(TDIFF_SOURCE_DIR) / "tests" / "gpu";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      const std::string tag = "// covers:";
      if (!line.starts_with(tag)) continue;
      std::stringstream ss(line.substr(tag.size()));
      std::string kind;
      while (std::getline(ss, kind, ',')) {
        kind.erase(0, kind.find_first_not_of(' '));
        kind.erase(kind.find_last_not_of(' ') + 1);
        out[e.path().filename().string()].insert(kind);
      }
    }
  }
  return out;
}

TEST(OpTable, GpuTestFilesListTheKindsTheTableGivesThem) {
  const auto covers = gpu_test_covers();
  std::map<std::string, std::set<std::string>> assigned;
  for (const OpInfo& op : op_table())
    if (*op.gpu_test) assigned[op.gpu_test].insert(op.name);
  for (const auto& [file, kinds] : assigned) {
    ASSERT_TRUE(std::filesystem::exists(std::filesystem::path(TDIFF_SOURCE_DIR) / "tests" / "gpu" / file)) << file;
    EXPECT_EQ(covers.count(file) ? covers.at(file) : std::set<std::string>{}, kinds) << file << "'s // covers: line";
  }
  for (const auto& [file, kinds] : covers)
    EXPECT_TRUE(assigned.count(file)) << file << " covers kinds the operator table does not give it";
}

}  // namespace
}  // namespace tdiff
