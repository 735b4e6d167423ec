// A boundaries reference (golden --store boundaries; casefile/reference_layers.h): it stores what
// each layer reads from outside itself, and every stage read through it is the full reference's,
// byte for byte, whatever order and budget it is read in. A recomputed layer that does not
// reproduce its stored boundary, and a model folder that is gone, are one InputError each.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/h5io.h"
#include "casefile/reference_layers.h"
#include "casefile/reference_store.h"
#include "casefile/session.h"
#include "emu_case.h"
#include "model/op_table.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The same model and prompts twice: dir/case.h5 with every stage, dir/boundaries.h5 with the boundaries.
struct TwoStores {
  std::string full, boundaries, model;
};

TwoStores make_two_stores(const fs::path& dir, const std::string& preset) {
  const ModelConfig c = synth_preset(preset);
  const std::vector<std::vector<std::int64_t>> prompts = {testing::random_ids(13, c.vocab_size, 1),
                                                          testing::random_ids(9, c.vocab_size, 2)};
  TwoStores out;
  out.full = testing::build_golden_case(dir, c, 5, prompts, 16);
  out.model = (dir / "model").string();
  out.boundaries = (dir / "boundaries.h5").string();
  fs::copy_file(out.full, out.boundaries);
  CaseSession session = open_session(out.boundaries);
  app::ReferenceRequest request;
  request.boundaries = true;
  app::write_reference(session, request);
  return out;
}

class ReferenceBoundaries : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tdiff-boundaries-{}-{}", GetParam(), ::getpid());
    fs::remove_all(dir_);
    stores_ = make_two_stores(dir_, GetParam());
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  TwoStores stores_;
};

// What a layer reads from another layer or from outside the layers is stored; its inner stages are not.
TEST_P(ReferenceBoundaries, StoreWhatEveryLayerReadsFromOutside) {
  const auto stages = build_stages(synth_preset(GetParam()));
  const auto names = boundary_stages(stages);
  const std::set<std::string> kept(names.begin(), names.end());
  std::map<std::string, int> layer;
  for (const auto& s : stages) layer[s.name] = s.layer;
  for (const auto& s : stages) {
    if (s.layer < 0 || op_info(s.kind).selection) {
      EXPECT_TRUE(kept.count(s.name)) << s.name;
    }
    for (const auto& in : s.inputs) {
      if (in.stage != "inputs" && layer.at(in.stage) != s.layer) {
        EXPECT_TRUE(kept.count(in.stage)) << in.key();
      }
    }
  }
  EXPECT_TRUE(kept.count("L00.hc_ffn.post"));
  EXPECT_TRUE(kept.count("lm_head"));
  EXPECT_FALSE(kept.count("L00.attn.core"));
  EXPECT_FALSE(kept.count("L00.moe.experts"));
  EXPECT_LT(names.size() * 4, stages.size());
  EXPECT_EQ(h5_read_attrs(stores_.boundaries, "/reference").at("store"), "boundaries");
  EXPECT_EQ(h5_read_attrs(stores_.full, "/reference").at("store"), "all");
  EXPECT_EQ(reference_stages(stores_.boundaries), names);
}

// A reader walking the stages in order (run, compare) gets the full store's bytes, and each
// layer is recomputed once.
TEST_P(ReferenceBoundaries, EveryStageInOrderIsTheFullStoresBytes) {
  CaseSession session = open_session(stores_.boundaries);
  ReferenceStore& store = session.reference();
  ReferenceStore full(stores_.full, 0);
  EXPECT_EQ(store.stages(), full.stages());
  std::size_t tensors = 0;
  for (const auto& s : session.stages) {
    ASSERT_TRUE(store.has_stage(s.name)) << s.name;
    for (const auto& t : s.outputs) {
      ASSERT_TRUE(store.has(s.name, t)) << s.name;
      EXPECT_TRUE(same_bytes(store.get_shared(s.name, t), full.get(s.name, t))) << s.name << "/" << t;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, full.contract().specs().size());
  EXPECT_EQ(store.recomputed_layers(), static_cast<std::size_t>(session.info.config.num_hidden_layers));
  EXPECT_EQ(store.stored_stages(), reference_stages(stores_.boundaries));
}

// Backwards with nothing kept: every read recomputes its layer, from the model the case records.
TEST_P(ReferenceBoundaries, BackwardsWithoutABudgetStillTheSameBytes) {
  ReferenceStore store(stores_.boundaries, 0);
  ReferenceStore full(stores_.full, 0);
  const auto& specs = full.contract().specs();
  for (auto it = specs.rbegin(); it != specs.rend(); ++it)
    EXPECT_TRUE(same_bytes(store.get(it->stage, it->tensor), full.get(it->stage, it->tensor))) << it->key();
  EXPECT_EQ(store.kept_bytes(), 0u);
  EXPECT_GT(store.recomputed_layers(), static_cast<std::size_t>(synth_preset(GetParam()).num_hidden_layers));
}

// golden --stages over a boundaries reference adds stages and keeps the kind; on a case without
// a reference it makes a partial one, which recomputes nothing.
TEST_P(ReferenceBoundaries, GoldenOfSomeStagesKeepsTheKind) {
  {
    CaseSession session = open_session(stores_.boundaries);
    app::ReferenceRequest request;
    request.stages = "L01.attn.*";
    app::write_reference(session, request);
  }
  EXPECT_EQ(h5_read_attrs(stores_.boundaries, "/reference").at("store"), "boundaries");
  ReferenceStore store(stores_.boundaries, 0);
  ReferenceStore full(stores_.full, 0);
  EXPECT_TRUE(store.stored("L01.attn.core"));
  EXPECT_FALSE(store.stored("L01.moe.experts"));
  for (const auto& spec : full.contract().specs())
    EXPECT_TRUE(same_bytes(store.get(spec.stage, spec.tensor), full.get(spec.stage, spec.tensor))) << spec.key();

  const std::string partial = (dir_ / "partial.h5").string();
  fs::copy_file(stores_.full, partial);
  {
    CaseSession session = open_session(partial);
    app::ReferenceRequest request;
    request.stages = "lm_head";
    request.keep_others = false;
    app::write_reference(session, request);
  }
  EXPECT_EQ(h5_read_attrs(partial, "/reference").at("store"), "stages");
  ReferenceStore some(partial, 0);
  EXPECT_EQ(some.stages(), std::vector<std::string>{"lm_head"});
  EXPECT_FALSE(some.has("L01.attn.core", "o"));
  EXPECT_THROW(some.get("L01.attn.core", "o"), InputError);
}

INSTANTIATE_TEST_SUITE_P(Presets, ReferenceBoundaries, ::testing::Values("tiny", "small"));

class ReferenceBoundariesBadInput : public ReferenceBoundaries {};

// A stored boundary that the layer's recompute does not reproduce (edited, or other weights).
TEST_P(ReferenceBoundariesBadInput, ABoundaryTheLayerDoesNotReproduceIsNamed) {
  {
    H5Writer w(stores_.boundaries, stores_.boundaries);
    Tensor x = h5_read(stores_.boundaries, "/reference/L00.hc_ffn.post/X");
    x.data<double>()[3] += 1e-9;
    w.write("/reference/L00.hc_ffn.post/X", x);
    w.commit();
  }
  ReferenceStore store(stores_.boundaries, 0);
  try {
    store.get("L00.attn.core", "o");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              stores_.boundaries +
                  ": L00.hc_ffn.post/X recomputed from the stored layer boundary differs from the "
                  "stored one: the model's weights or this build's refcpu are not those `tdiff golden` "
                  "used (run it again)");
  }
}

// The model folder is gone: reading a recomputed stage names it; the stored ones still read.
TEST_P(ReferenceBoundariesBadInput, AMissingModelFolderIsNamed) {
  fs::rename(stores_.model, dir_ / "moved");
  ReferenceStore store(stores_.boundaries, 0);
  EXPECT_EQ(store.get("lm_head", "logits").dim(0), 2);
  try {
    store.get("L01.attn.core", "o");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), fmt::format("{}: model folder '{}' does not exist (pass --model DIR)",
                                                 stores_.boundaries, fs::absolute(stores_.model).string()));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ReferenceBoundariesBadInput, ::testing::Values("tiny"));

}  // namespace
}  // namespace tdiff
