// The numerics policy (numerics/policy.h): the fault catalog, presets, TOML/JSON policy files,
// --set specs, and the input errors for unknown knobs, values and stage patterns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "numerics/policy.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / fmt::format("tdiff-policy-{}-{}", ::getpid(), name);
  std::ofstream(p) << text;
  return p.string();
}

const std::vector<Stage>& tiny_stages() {
  static const std::vector<Stage> stages = build_stages(synth_preset("tiny"));
  return stages;
}

TEST(Policy, CatalogIsConsistent) {
  std::set<std::string> names;
  for (const auto& k : knob_catalog()) {
    EXPECT_TRUE(names.insert(k.name).second) << "duplicate knob " << k.name;
    EXPECT_FALSE(k.kinds.empty()) << k.name;
    EXPECT_FALSE(k.effect.empty()) << k.name;
    EXPECT_NE(k.bad, k.good) << k.name;
    for (const auto* v : {&k.bad, &k.good})
      EXPECT_NE(std::find(k.values.begin(), k.values.end(), *v), k.values.end()) << k.name << " " << *v;
    // Every value parses and reads back as written.
    for (const auto& v : k.values) {
      Numerics n;
      set_knob(n, k.name, v);
      EXPECT_EQ(get_knob(n, k.name), v) << k.name;
    }
  }
  // The architecture's own fault classes are in the catalog.
  for (const char* k : {"sinkhorn", "hc_eps", "index_score", "router", "routing_bias", "routing_norm_eps", "shared_clip",
                        "pool_softmax", "stream"})
    EXPECT_TRUE(names.count(k)) << k;
}

TEST(Policy, PresetsDifferAsDocumented) {
  const Numerics fixed = preset_numerics("fixed"), naive = preset_numerics("naive"), fp32 = preset_numerics("fp32");
  EXPECT_EQ(fixed, Numerics{});  // the struct defaults are the fixed preset
  for (const auto& k : knob_catalog()) {
    EXPECT_EQ(get_knob(fixed, k.name), k.good) << "fixed takes every knob's good setting: " << k.name;
    EXPECT_EQ(get_knob(naive, k.name), k.in_naive ? k.bad : k.good) << k.name;
    const bool has_fp32 = std::find(k.values.begin(), k.values.end(), "fp32") != k.values.end();
    if (has_fp32) EXPECT_EQ(get_knob(fp32, k.name), "fp32") << k.name;
    else EXPECT_EQ(get_knob(fp32, k.name), k.good) << k.name;
  }
  // The "default precision" column: fp16 accumulation, statistics and logits, unstable ties, atomics.
  EXPECT_EQ(naive.matmul_accum, DType::f16);
  EXPECT_EQ(naive.qk_accum, DType::f16);
  EXPECT_EQ(naive.pv_accum, DType::f16);
  EXPECT_EQ(naive.softmax_stats, DType::f16);
  EXPECT_EQ(naive.logits, DType::f16);
  EXPECT_EQ(naive.topk_ties, TieBreak::unstable);
  EXPECT_EQ(naive.reduction, Reduction::atomic);
  // fixed: 16-bit activations with fp32 accumulation and statistics, an fp32 router, fp32
  // streams and fp32 logits (as DeepSeek's inference), deterministic reductions, ties by index.
  EXPECT_EQ(fixed.storage, DType::bf16);
  EXPECT_EQ(fixed.matmul_accum, DType::f32);
  EXPECT_EQ(fixed.router, DType::f32);
  EXPECT_EQ(fixed.stream, DType::f32);
  EXPECT_EQ(fixed.logits, DType::f32);
  EXPECT_EQ(fixed.topk_ties, TieBreak::index);
  EXPECT_EQ(fixed.reduction, Reduction::fixed);
  EXPECT_EQ(fp32.storage, DType::f32);
  EXPECT_EQ(fp32.logits, DType::f32);
  EXPECT_EQ(fp32.topk_ties, TieBreak::index);
  EXPECT_NE(naive, fixed);
  EXPECT_NE(fp32, fixed);
  EXPECT_THROW(preset_numerics("fast"), InputError);
}

TEST(Policy, SetSpecsApplyToMatchingStages) {
  Policy p = Policy::preset("fixed");
  p.add_set("L02.attn.core:softmax_stats=fp16");
  p.add_set("L0[13].attn.*:qk_accum=fp16");
  p.add_set("rope_angle=bf16");  // every stage
  p.validate(tiny_stages());
  EXPECT_EQ(p.resolve("L02.attn.core").softmax_stats, DType::f16);
  EXPECT_EQ(p.resolve("L01.attn.core").softmax_stats, DType::f32);
  EXPECT_EQ(p.resolve("L01.attn.core").qk_accum, DType::f16);
  EXPECT_EQ(p.resolve("L02.attn.core").qk_accum, DType::f32);
  EXPECT_EQ(p.resolve("lm_head").rope_angle, RopeAngle::bf16);
  EXPECT_EQ(p.describe(), "fixed + L02.attn.core:softmax_stats=fp16 + L0[13].attn.*:qk_accum=fp16 + *:rope_angle=bf16");
  // Later overrides win.
  p.add_set("L02.attn.core:softmax_stats=fp32");
  EXPECT_EQ(p.resolve("L02.attn.core").softmax_stats, DType::f32);
}

TEST(Policy, AliasesParseToTheirValues) {
  Numerics n;
  set_knob(n, "storage", "f16");
  set_knob(n, "matmul_input", "f8_e4m3");
  set_knob(n, "hc_eps", "false");
  set_knob(n, "rope_angle", "f16");
  EXPECT_EQ(n.storage, DType::f16);
  EXPECT_EQ(n.matmul_input, DType::f8_e4m3);
  EXPECT_FALSE(n.hc_eps);
  EXPECT_EQ(n.rope_angle, RopeAngle::f16);
  Policy p = Policy::preset("fixed");
  p.add_set("L01.attn.core:qk_accum=f16");
  EXPECT_EQ(p.resolve("L01.attn.core").qk_accum, DType::f16);
  EXPECT_EQ(p.describe(), "fixed + L01.attn.core:qk_accum=f16");  // as written
}

TEST(Policy, BadSpecsAreInputErrors) {
  Policy p = Policy::preset("fixed");
  EXPECT_THROW(p.add_set("bogus=1"), InputError);                       // unknown knob
  EXPECT_THROW(p.add_set("softmax_stats=fp8"), InputError);             // value the knob does not take
  EXPECT_THROW(p.add_set("mask_style=zero"), InputError);
  EXPECT_THROW(p.add_set("L02.attn.core:softmax_stats"), InputError);   // no '='
  EXPECT_THROW(p.add_set("hc_eps=maybe"), InputError);
  EXPECT_THROW(p.add_set("mask_style=true"), InputError);  // an alias only where its value exists
  EXPECT_THROW(p.add_set("rope_angle=f8_e4m3"), InputError);
  try {
    p.add_set("bogus=1");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown knob 'bogus'"), std::string::npos) << e.what();
  }
  Policy q = Policy::preset("fixed");
  q.add_set("L99.attn.core:qk_accum=fp16");  // parses; matches nothing of the model
  EXPECT_THROW(q.validate(tiny_stages()), InputError);
  EXPECT_THROW(Policy::load("bogus"), InputError);  // neither a preset nor a policy file
}

TEST(Policy, TomlFile) {
  const std::string f = write_temp("a.toml",
                                   "preset = \"naive\"\n"
                                   "topk_ties = \"index\"\n"
                                   "[global]\n"
                                   "reduction = \"fixed\"\n"
                                   "hc_eps = false\n"
                                   "[[override]]\n"
                                   "stages = \"L02.attn.core\"\n"
                                   "softmax_stats = \"fp32\"\n"
                                   "[[override]]\n"
                                   "stages = \"L0*.moe.router\"\n"
                                   "router = \"fp32\"\n");
  Policy p = Policy::load(f);
  p.validate(tiny_stages());
  const Numerics core2 = p.resolve("L02.attn.core"), core1 = p.resolve("L01.attn.core");
  EXPECT_EQ(core1.softmax_stats, DType::f16);  // naive
  EXPECT_EQ(core2.softmax_stats, DType::f32);  // override
  EXPECT_EQ(core1.topk_ties, TieBreak::index);
  EXPECT_EQ(core1.reduction, Reduction::fixed);
  EXPECT_FALSE(core1.hc_eps);
  EXPECT_EQ(p.resolve("L01.moe.router").router, DType::f32);
  EXPECT_EQ(p.resolve("lm_head").router, DType::bf16);
  fs::remove(f);
}

TEST(Policy, JsonFileMatchesToml) {
  const std::string t = write_temp("b.toml",
                                   "preset = \"fixed\"\n[[override]]\nstages = \"L01.attn.*\"\nqk_accum = \"fp16\"\n");
  const std::string j = write_temp("b.json",
                                   R"({"preset": "fixed", "override": [{"stages": "L01.attn.*", "qk_accum": "fp16"}]})");
  const Policy a = Policy::load(t), b = Policy::load(j);
  for (const auto& s : tiny_stages()) EXPECT_EQ(a.resolve(s.name), b.resolve(s.name)) << s.name;
  EXPECT_EQ(b.resolve("L01.attn.core").qk_accum, DType::f16);
  fs::remove(t);
  fs::remove(j);
}

TEST(Policy, BadFilesAreInputErrors) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"c1.toml", "preset = \"fixed\"\nbogus = \"fp16\"\n"},                       // unknown knob
      {"c2.toml", "storage = \"fp64\"\n"},                                         // unknown value
      {"c3.toml", "[[override]]\nqk_accum = \"fp16\"\n"},                          // override without stages
      {"c4.toml", "preset = \"fixed\"\n[[override\n"},                             // parse error
      {"c5.json", R"({"preset": "fixed", "qk_accum": 16})"},                       // wrong type
      {"c6.json", R"({"preset": )"},                                               // not JSON
      {"c7.toml", "preset = \"turbo\"\n"},                                         // unknown preset
  };
  for (const auto& [name, text] : bad) {
    const std::string f = write_temp(name, text);
    EXPECT_THROW(Policy::load(f), InputError) << name;
    fs::remove(f);
  }
  EXPECT_THROW(Policy::load("/nonexistent/policy.toml"), InputError);
  // A folder named like a policy file (it ran as an empty policy).
  const fs::path dir = fs::temp_directory_path() / fmt::format("tdiff-policy-dir-{}.toml", ::getpid());
  fs::create_directories(dir);
  try {
    Policy::load(dir.string());
    ADD_FAILURE() << "a folder was read as a policy";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tdiff
