// The tensor contract (model/tensor_contract.h) against what golden writes: for the tiny and
// small presets, padded on either side, at sequence lengths where a compressed layer has no
// entry (n = 0) and where the indexer selects, every stored reference tensor has exactly the
// contract's dtype and shape, the contract lists nothing the reference lacks, and the stored
// selections are in their ranges. Then the checks themselves: what each kind of bad tensor is
// told.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/h5io.h"
#include "emu_case.h"
#include "model/tensor_contract.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

struct GoldenCase {
  std::string preset;
  std::vector<std::int64_t> lengths;  // one prompt per row
  std::int64_t pad_to;
  bool pad_left;
};

// The case's reference as golden wrote it, checked tensor by tensor against the contract.
void expect_reference_matches_contract(const GoldenCase& g) {
  SCOPED_TRACE(fmt::format("{} S={} {}", g.preset, g.pad_to, g.pad_left ? "left" : "right"));
  const fs::path dir = fs::temp_directory_path() / fmt::format("tdiff-contract-{}-{}-{}", g.preset, g.pad_to, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ModelConfig config = synth_preset(g.preset);
  std::vector<std::vector<std::int64_t>> prompts;
  for (std::size_t r = 0; r < g.lengths.size(); ++r)
    prompts.push_back(testing::random_ids(g.lengths[r], config.vocab_size, 11 + r));
  const std::string path = testing::build_golden_case(dir, config, 3, prompts, g.pad_to, g.pad_left);
  const CaseInfo info = read_case(path);
  ASSERT_EQ(info.batch.seq(), g.pad_to);
  const TensorContract contract(build_stages(config), config, info.batch.rows(), info.batch.seq());

  std::set<std::string> stored;
  for (const auto& dataset : h5_list_datasets(path, "/reference")) stored.insert(dataset.substr(std::string("/reference/").size()));
  std::set<std::string> listed;
  for (const auto& spec : contract.specs()) {
    listed.insert(spec.key());
    SCOPED_TRACE(spec.key());
    ASSERT_TRUE(stored.count(spec.key())) << "the contract lists a tensor the reference lacks";
    const Tensor t = h5_read(path, "/reference/" + spec.key());
    EXPECT_EQ(t.shape(), spec.shape()) << spec.axes_str();
    const DType want = spec.value == ValueClass::floating ? DType::f64 : spec.value == ValueClass::index ? DType::i64 : DType::boolean;
    EXPECT_EQ(t.dtype(), want);
    EXPECT_NO_THROW(TensorContract::check_layout(spec, t.dtype(), t.shape(), StoredBy::reference, path, spec.key()));
    EXPECT_NO_THROW(TensorContract::check_values(spec, t, path, spec.key()));
  }
  EXPECT_EQ(stored, listed) << "the reference holds a tensor the contract does not list";
  fs::remove_all(dir);
}

TEST(TensorContract, TinyReferenceMatchesExactlyWithNoHcaEntry) {
  // S = 6: one CSA entry (k = 1), no HCA entry (n = 0 at rate 8): empty tensors.
  expect_reference_matches_contract({"tiny", {5, 3}, 6, false});
}

TEST(TensorContract, TinyReferenceMatchesExactlyWhereTheIndexerSelects) {
  // S = 44: 11 CSA entries (k = 4 of them), 5 HCA entries; left padding.
  expect_reference_matches_contract({"tiny", {44, 30}, 44, true});
}

TEST(TensorContract, SmallReferenceMatchesExactlyWithNoHcaEntry) {
  // S = 14: 3 CSA entries (k = 3), HCA rate 16 gives n = 0; two sliding layers, hash routing.
  expect_reference_matches_contract({"small", {14, 9}, 14, true});
}

TEST(TensorContract, SmallReferenceMatchesExactlyWhereTheIndexerSelects) {
  expect_reference_matches_contract({"small", {40, 33, 12}, 40, false});
}

// model-spec §9's table, for the tiny model at B = 2, S = 40.
TEST(TensorContract, TinyShapesAreTheSpecsWorkedExample) {
  const ModelConfig c = synth_preset("tiny");
  const TensorContract k(build_stages(c), c, 2, 40);
  auto shape = [&](const std::string& key) {
    const TensorSpec* s = k.find(key);
    return s ? s->shape() : Shape{-1};
  };
  EXPECT_EQ(shape("hc.expand/X"), (Shape{2, 40, 4, 64}));
  EXPECT_EQ(shape("rope.main/cos"), (Shape{2, 40, 4}));
  EXPECT_EQ(shape("mask.window/mask"), (Shape{2, 40, 40}));
  EXPECT_EQ(shape("L00.hc_attn.sinkhorn/comb"), (Shape{2, 40, 4, 4}));
  EXPECT_EQ(shape("L00.attn.q_rope/q"), (Shape{2, 40, 4, 32}));
  EXPECT_EQ(shape("L00.attn.o_a/out"), (Shape{2, 40, 32}));
  EXPECT_EQ(shape("L00.moe.router/score"), (Shape{80, 8}));
  EXPECT_EQ(shape("L00.moe.select/idx"), (Shape{80, 2}));
  EXPECT_EQ(shape("L00.moe.out/f"), (Shape{2, 40, 64}));
  EXPECT_EQ(shape("L01.attn.cmp.proj/P"), (Shape{2, 40, 64}));
  EXPECT_EQ(shape("L01.attn.cmp.rope/C"), (Shape{2, 10, 32}));
  EXPECT_EQ(shape("L01.attn.idx.proj/Z"), (Shape{2, 40, 32}));
  EXPECT_EQ(shape("L01.attn.idx.rope/KI"), (Shape{2, 10, 16}));
  EXPECT_EQ(shape("L01.attn.idx.q_rope/QI"), (Shape{2, 40, 4, 16}));
  EXPECT_EQ(shape("L01.attn.idx.weights/w"), (Shape{2, 40, 4}));
  EXPECT_EQ(shape("L01.attn.idx.score/score"), (Shape{2, 40, 10}));
  EXPECT_EQ(shape("L01.attn.idx.topk/sel"), (Shape{2, 40, 4}));
  EXPECT_EQ(shape("L01.attn.cmp.mask/mask"), (Shape{2, 40, 10}));
  EXPECT_EQ(shape("L02.attn.cmp.proj/P"), (Shape{2, 40, 32}));
  EXPECT_EQ(shape("L02.attn.cmp.pool/out"), (Shape{2, 5, 32}));
  EXPECT_EQ(shape("final.hc_head/preh"), (Shape{2, 40, 4}));
  EXPECT_EQ(shape("lm_head/logits"), (Shape{2, 40, 256}));
  EXPECT_EQ(k.find("L01.attn.idx.topk/sel")->axes_str(), "[B,S,k]");
  EXPECT_EQ(k.find("L00.moe.select/idx")->range->hi, 8);
  EXPECT_EQ(k.find("L01.attn.idx.topk/sel")->range->lo, -1);
  EXPECT_EQ(k.find("L01.attn.idx.topk/sel")->range->hi, 10);
  EXPECT_EQ(k.find("nope/x"), nullptr);
}

// What each bad tensor is told: the file, the dataset and what was expected.
TEST(TensorContract, ChecksNameTheFileTheDatasetAndWhatWasExpected) {
  const ModelConfig c = synth_preset("tiny");
  const TensorContract k(build_stages(c), c, 2, 40);
  const TensorSpec& sel = *k.find("L01.moe.select/idx");
  EXPECT_EQ(input_error_of([&] { TensorContract::check_layout(sel, DType::i64, {3, 3}, StoredBy::reference, "c.h5", "/reference/L01.moe.select/idx"); }),
            "c.h5: dataset '/reference/L01.moe.select/idx' is i64 [3,3], expected i64 [N,K] = [80,2]");
  EXPECT_EQ(input_error_of([&] { TensorContract::check_layout(sel, DType::f64, {80, 2}, StoredBy::reference, "c.h5", "/d"); }),
            "c.h5: dataset '/d' is f64 [80,2], expected i64 [N,K] = [80,2]");
  // A saved run may store lower floats and other integer widths; a dump may drop size-1 dimensions.
  const TensorSpec& q = *k.find("L00.attn.q_rope/q");
  EXPECT_NO_THROW(TensorContract::check_layout(q, DType::bf16, {2, 40, 4, 32}, StoredBy::saved_run, "r.h5", "/d"));
  EXPECT_NO_THROW(TensorContract::check_layout(sel, DType::i32, {80, 2}, StoredBy::saved_run, "r.h5", "/d"));
  EXPECT_NO_THROW(TensorContract::check_layout(q, DType::f32, {1, 2, 40, 4, 32}, StoredBy::dump, "d.h5", "/d"));
  EXPECT_NE(input_error_of([&] { TensorContract::check_layout(q, DType::f32, {1, 2, 40, 4, 32}, StoredBy::saved_run, "r.h5", "/d"); }),
            "(no InputError)");
  EXPECT_EQ(input_error_of([&] { TensorContract::check_layout(q, DType::f32, {2, 40, 4, 32}, StoredBy::reference, "c.h5", "/d"); }),
            "c.h5: dataset '/d' is f32 [2,40,4,32], expected f64 [B,S,H,d] = [2,40,4,32]");
  EXPECT_EQ(input_error_of([&] { TensorContract::check_layout(q, DType::i64, {2, 40, 4, 32}, StoredBy::dump, "d.h5", "/d"); }),
            "d.h5: dataset '/d' is i64 [2,40,4,32], expected floats [B,S,H,d] = [2,40,4,32] (size-1 dimensions aside)");

  Tensor ids(DType::i64, {80, 2});
  ids.data<std::int64_t>()[11] = 8;
  EXPECT_EQ(input_error_of([&] { TensorContract::check_values(sel, ids, "c.h5", "/d"); }),
            "c.h5: dataset '/d' holds 8 at [5,1], expected expert ids in [0,8)");
  ids.data<std::int64_t>()[11] = -1;
  EXPECT_NE(input_error_of([&] { TensorContract::check_values(sel, ids, "c.h5", "/d"); }), "(no InputError)");
  const TensorSpec& topk = *k.find("L01.attn.idx.topk/sel");
  Tensor entries(DType::i32, {2, 40, 4});
  entries.data<std::int32_t>()[0] = -1;  // no entry: valid
  EXPECT_NO_THROW(TensorContract::check_values(topk, entries, "c.h5", "/d"));
  entries.data<std::int32_t>()[7] = 1000000000;
  EXPECT_EQ(input_error_of([&] { TensorContract::check_values(topk, entries, "c.h5", "/d"); }),
            "c.h5: dataset '/d' holds 1000000000 at [0,1,3], expected entry ids in [-1,10) (-1: none)");
  Tensor mask(DType::boolean, {2, 40, 40});
  mask.data<std::uint8_t>()[1] = 2;
  EXPECT_EQ(input_error_of([&] { TensorContract::check_values(*k.find("mask.window/mask"), mask, "c.h5", "/d"); }),
            "c.h5: dataset '/d' holds 2 at [0,0,1], expected a flag (0 or 1)");
}

}  // namespace
}  // namespace tdiff
