// `tdiff compare` through the real binary: exit codes 0 / 1 / 2 and the report files.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "casefile/h5io.h"

namespace tdiff {
namespace {

Tensor wave(Shape shape, double noise) {
  Tensor t(DType::f32, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(std::sin(0.1 * static_cast<double>(i)) + 0.2 + noise * std::cos(3.0 * i));
  return t;
}

class CompareCli : public ::testing::Test {
 protected:
  std::filesystem::path dir_;
  std::string ref_, good_, bad_, out_;

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tdiff_cli_cmp_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ref_ = (dir_ / "ref.h5").string(), good_ = (dir_ / "good.h5").string(), bad_ = (dir_ / "bad.h5").string();
    out_ = (dir_ / "out").string();
    write(ref_, "/reference", 0.0);
    write(good_, "", 1e-4);
    write(bad_, "", 0.3);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void write(const std::string& path, const std::string& group, double noise) {
    H5Writer w(path);
    w.write(group + "/embed/e", wave({4, 16}, noise));
    w.write(group + "/L00.attn.core/o", wave({2, 4, 16}, noise));
    w.write(group + "/lm_head/logits", wave({1, 4, 32}, noise));
    w.commit();
  }

  // Runs tdiff with `args`; returns the exit code, stdout+stderr in `output`.
  int tdiff(const std::string& args, std::string* output = nullptr) {
    const std::string log = (dir_ / "log.txt").string();
    const int status = std::system((std::string(TDIFF_BIN) + " " + args + " > " + log + " 2>&1").c_str());
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    if (output) *output = ss.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

TEST_F(CompareCli, PassWritesAllReports) {
  std::string out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " -o " + out_, &out), 0) << out;
  EXPECT_NE(out.find("verdict PASS"), std::string::npos) << out;
  EXPECT_EQ(out.find("\033["), std::string::npos) << "no colours when stdout is not a terminal";
  for (const char* f : {"report.csv", "report.json", "junit.xml", "report.html"})
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(out_) / f)) << f;
  std::ifstream csv(std::filesystem::path(out_) / "report.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("stage,tensor,cosine,max_abs,rmse,rel_l2,verdict", 0), 0u) << header;
  for (const auto& e : std::filesystem::directory_iterator(out_))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "temporary left behind: " << e.path();
}

TEST_F(CompareCli, FailExitsOne) {
  std::string out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + bad_ + " --no-reports", &out), 1) << out;
  EXPECT_NE(out.find("first FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("reproduce   tdiff compare"), std::string::npos) << out;
  // Loosened thresholds for everything turn the same run into a pass.
  EXPECT_EQ(tdiff("compare " + ref_ + " " + bad_ + " --no-reports --threshold max_abs_fail=10,max_abs_warn=10"
                  " --threshold cosine_fail=0",
                  &out),
            0)
      << out;
  // Restricting to the stage that passes; a rule for stages outside the selection is fine.
  EXPECT_EQ(tdiff("compare " + ref_ + " " + bad_ + " --no-reports --stages 'embed' --threshold 'L00.*:max_abs_warn=1'",
                  &out),
            1)
      << out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --no-reports --stages 'embed' --threshold 'L00.*:max_abs_warn=1'",
                  &out),
            0)
      << out;
}

TEST_F(CompareCli, NoiseFloorGate) {
  // A candidate 1000x noisier than the floor run fails the gate though it passes the fixed
  // thresholds once they are loosened; with the floor as candidate it passes.
  const std::string loose = " --no-reports --threshold max_abs_fail=10,max_abs_warn=10,cosine_fail=0";
  std::string out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + bad_ + " --floor " + good_ + loose, &out), 1) << out;
  EXPECT_NE(out.find("x floor"), std::string::npos) << out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --floor " + bad_ + loose, &out), 0) << out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + bad_ + " --floor " + good_ + " --floor-k 5000" + loose, &out), 0) << out;
}

TEST_F(CompareCli, InputErrorsExitTwo) {
  std::string out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + (dir_ / "missing.h5").string(), &out), 2) << out;
  EXPECT_NE(out.find("missing.h5"), std::string::npos) << out;
  EXPECT_EQ(tdiff("compare " + ref_, &out), 2) << out;  // usage
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --no-reports --stages 'L99.*'", &out), 2) << out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --no-reports --threshold 'L99.*:max_abs_warn=1'", &out), 2)
      << out;
  EXPECT_NE(out.find("matches no stage"), std::string::npos) << out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --no-reports --threshold max_abs_scaled=2", &out), 2) << out;
  EXPECT_NE(out.find("max_abs_scaled is a switch"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one line
  const std::string toml = (dir_ / "bad.toml").string();
  std::ofstream(toml) << "[default]\nmax_abs = 1\n";
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " --no-reports --thresholds " + toml, &out), 2) << out;
  EXPECT_NE(out.find("bad.toml"), std::string::npos) << out;
}

// A shape mismatch is one FAIL row (exit 1), the other pairs are still compared, and shapes
// that differ only by size-1 dimensions ([1,4,32] and [4,32]) compare normally.
TEST_F(CompareCli, ShapeMismatchIsOneFailRow) {
  {
    H5Writer w(good_, good_);
    w.write("/embed/e", wave({16, 4}, 0.0));
    w.write("/lm_head/logits", wave({4, 32}, 1e-4));
    w.commit();
  }
  std::string out;
  EXPECT_EQ(tdiff("compare " + ref_ + " " + good_ + " -o " + out_, &out), 1) << out;
  EXPECT_NE(out.find("shape mismatch: reference [4,16] vs candidate [16,4]"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict FAIL (1 tensor FAIL): 1 FAIL, 0 WARN, 2 PASS of 3 tensors"), std::string::npos) << out;
  std::ifstream csv(std::filesystem::path(out_) / "report.csv");
  std::string line, rows;
  while (std::getline(csv, line)) rows += line + "\n";
  EXPECT_NE(rows.find("embed,e,"), std::string::npos) << rows;
  EXPECT_NE(rows.find("lm_head,logits,"), std::string::npos) << rows;
  EXPECT_NE(out.find("logits      lm_head/logits: KL mean"), std::string::npos) << out;
  EXPECT_NE(out.find("            top-1 agreement"), std::string::npos) << out;
}

}  // namespace
}  // namespace tdiff
