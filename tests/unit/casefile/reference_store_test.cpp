// The reference store (casefile/reference_store.h) reads one file for its whole life: when
// the case is replaced by rename (as `tdiff golden` replaces it) while a command reads it, the
// command keeps reading the reference it opened, never a mix of two and never "missing".
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/h5io.h"
#include "casefile/reference_store.h"
#include "casefile/session.h"
#include "emu_case.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class ReferenceStoreFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tdiff-refstore-{}", ::getpid());
    fs::remove_all(dir_);
    const ModelConfig c = synth_preset("tiny");
    const std::vector<std::vector<std::int64_t>> prompts = {testing::random_ids(12, c.vocab_size, 1)};
    // Two references of the same shapes from two models: every tensor differs.
    a_ = testing::build_golden_case(dir_ / "a", c, 3, prompts, 0);
    b_ = testing::build_golden_case(dir_ / "b", c, 4, prompts, 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string a_, b_;
};

TEST_F(ReferenceStoreFile, KeepsReadingTheFileItOpenedAfterARename) {
  const Tensor old_logits = h5_read(a_, "/reference/lm_head/logits");
  const Tensor new_logits = h5_read(b_, "/reference/lm_head/logits");
  ASSERT_FALSE(same_bytes(old_logits, new_logits));
  ReferenceStore store(a_, 0);
  CaseSession session = open_session(a_);
  fs::rename(b_, a_);  // what golden's commit does to the case
  ASSERT_TRUE(same_bytes(h5_read(a_, "/reference/lm_head/logits"), new_logits)) << "the path reads the new file";

  EXPECT_TRUE(same_bytes(store.get("lm_head", "logits"), old_logits));
  EXPECT_TRUE(same_bytes(store.get("L01.attn.core", "o"), h5_read(store.file(), "/reference/L01.attn.core/o")));
  EXPECT_TRUE(store.has_stage("L03.moe.select"));
  EXPECT_TRUE(same_bytes(session.reference().get("lm_head", "logits"), old_logits));
  EXPECT_EQ(session.reference().stages().size(), build_stages(session.info.config).size());
}

// Tensors read through the store are checked against the case's contract.
TEST_F(ReferenceStoreFile, RefusesATensorOfAnotherShape) {
  {
    H5Writer w(a_, a_);
    w.write("/reference/L00.attn.q_rope/q", Tensor(DType::f64, {3, 3}));
    w.commit();
  }
  ReferenceStore store(a_, 0);
  try {
    store.get("L00.attn.q_rope", "q");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), a_ + ": dataset '/reference/L00.attn.q_rope/q' is f64 [3,3], expected f64 "
                                          "[B,S,H,d] = [1,12,4,32]");
  }
  EXPECT_THROW(store.get("nope", "x"), InputError);
}

}  // namespace
}  // namespace tdiff
