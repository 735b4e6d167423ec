// The `case new` and `info` commands on a small real model folder written here, including
// every bad-input path: exit 2, one line on stderr, nothing left behind.
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "casefile/case_file.h"
#include "model/stage_graph.h"
#include "model_folder.h"

namespace fs = std::filesystem;
using namespace tdiff;

namespace {

using tdiff::testing::slurp_bytes;
using tdiff::testing::write_model;

struct Result {
  int code = -1;
  std::string out, err;
};

class CaseCli : public tdiff::testing::ModelFolderTest {
 protected:
  Result tdiff(const std::string& args) const {
    Result r;
    const std::string o = path("stdout.txt"), e = path("stderr.txt");
    const int rc = std::system(fmt::format("{} {} > '{}' 2> '{}'", TDIFF_BIN, args, o, e).c_str());
    r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp_bytes(o);
    r.err = slurp_bytes(e);
    return r;
  }
  // Exit code 2, exactly one line on stderr that names `what`, nothing left in out/.
  void expect_input_error(const std::string& args, const std::string& what) const {
    const Result r = tdiff(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "stderr does not name " << what << ": " << r.err;
    EXPECT_TRUE(out_dir_empty()) << "output left behind for: " << args;
  }
};

}  // namespace

TEST_F(CaseCli, NewThenInfo) {
  const std::string f = out("case.h5");
  Result r = tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 3 --pad-to 12 -o '{}'", model_, tokens_, f));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 prompts x 12 tokens"), std::string::npos) << r.out;
  EXPECT_EQ(read_case(f).seed, 3u);

  r = tdiff(fmt::format("info '{}'", f));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 prompts x 12 tokens, padding right (pad-to 12), seed 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7 [0,7), 5 [0,5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compressed_sparse_attention"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference none (run: tdiff golden"), std::string::npos) << r.out;

  const std::string g = out("rand.h5");
  r = tdiff(fmt::format("case new --model '{}' --random-prompts 3 --len 5 --seed 4 --pad-side left -o '{}'", model_, g));
  ASSERT_EQ(r.code, 0) << r.err;
  const CaseInfo c = read_case(g);
  EXPECT_EQ(c.batch.ids.shape(), (Shape{3, 5}));
  EXPECT_EQ(c.prompts, random_prompts(3, 5, 50, 4).lines);
}

TEST_F(CaseCli, InfoModelStages) {
  Result r = tdiff(fmt::format("info --model '{}' --stages", model_));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto stages = build_stages(config_);
  std::istringstream lines(r.out);
  std::string line;
  std::size_t longest = 0;
  while (std::getline(lines, line)) longest = std::max(longest, line.size());
  EXPECT_LE(longest, 100u) << r.out;
  for (const auto& s : stages) EXPECT_NE(r.out.find(" " + s.name + " "), std::string::npos) << s.name;
  EXPECT_NE(r.out.find(fmt::format("{} of {} stages", stages.size(), stages.size())), std::string::npos);
  EXPECT_NE(r.out.find("model.safetensors"), std::string::npos);

  r = tdiff(fmt::format("info --model '{}' --stages 'L01.attn.*'", model_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("L00."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L01.attn."), std::string::npos) << r.out;
  expect_input_error(fmt::format("info --model '{}' --stages 'nope*'", model_), "nope*");
}

TEST_F(CaseCli, MissingModelDir) {
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", path("nomodel"), tokens_,
                                 out("c.h5")),
                     path("nomodel"));
}

TEST_F(CaseCli, TruncatedSafetensors) {
  const std::string cut = path("cut");
  fs::create_directories(cut);
  fs::copy_file(model_ + "/config.json", cut + "/config.json");
  fs::copy_file(model_ + "/model.safetensors", cut + "/model.safetensors");
  fs::resize_file(cut + "/model.safetensors", fs::file_size(cut + "/model.safetensors") - 100);
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", cut, tokens_, out("c.h5")),
                     "model.safetensors");
}

TEST_F(CaseCli, WeightWithWrongShape) {
  const std::string bad = path("badshape");
  write_model(bad, config_, "model.layers.1.self_attn.kv_proj.weight", {16, 15});
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", bad, tokens_, out("c.h5")),
                     "model.layers.1.self_attn.kv_proj.weight");
}

TEST_F(CaseCli, TokenOutsideVocabulary) {
  const std::string t = path("oov.txt");
  std::ofstream(t) << "1 2 3\n4 5 50\n";
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, t, out("c.h5")),
                     t + ":2:");
}

TEST_F(CaseCli, PadToTooSmall) {
  expect_input_error(
      fmt::format("case new --model '{}' --tokens '{}' --seed 1 --pad-to 5 -o '{}'", model_, tokens_, out("c.h5")),
      tokens_ + ":1:");
}

TEST_F(CaseCli, MissingTokenFile) {
  expect_input_error(
      fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, path("none.txt"), out("c.h5")),
      path("none.txt"));
}

TEST_F(CaseCli, ExistingCaseIsKeptOnError) {
  const std::string f = out("case.h5");
  ASSERT_EQ(tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, tokens_, f)).code, 0);
  const std::string before = slurp_bytes(f);
  EXPECT_EQ(tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 1 --pad-to 3 -o '{}'", model_, tokens_, f)).code, 2);
  EXPECT_EQ(slurp_bytes(f), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "out"), fs::directory_iterator()), 1);
}

TEST_F(CaseCli, InfoOnDamagedCaseFiles) {
  const std::string f = path("case.h5");
  create_case(f, make_info());
  const std::string cut = out("cut.h5");
  fs::copy_file(f, cut);
  fs::resize_file(cut, fs::file_size(f) / 2);
  Result r = tdiff(fmt::format("info '{}'", cut));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(cut), std::string::npos) << r.err;

  r = tdiff(fmt::format("info '{}'", tokens_));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(tokens_ + ": not an HDF5 file"), std::string::npos) << r.err;

  r = tdiff(fmt::format("info '{}'", path("missing.h5")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
}
