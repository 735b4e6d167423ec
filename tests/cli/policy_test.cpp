// A bad policy on the command line (unknown knob or value, a stage pattern that matches
// nothing, an unknown preset) exits 2 through the whole path of `tdiff run`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

namespace tdiff {
namespace {

namespace fs = std::filesystem;

TEST(Policy, UnknownKnobThroughTheCliExitsWith2) {
  // The whole path: synth, case, golden are not needed to reject a bad --set; the case is.
  const fs::path dir = fs::temp_directory_path() / fmt::format("tdiff-policy-cli-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string bin = TDIFF_BIN;
  auto sh = [&](const std::string& cmd) { return WEXITSTATUS(std::system((cmd + " > /dev/null 2>&1").c_str())); };
  ASSERT_EQ(sh(fmt::format("{} synth --preset tiny --seed 1 -o {}/m", bin, dir.string())), 0);
  ASSERT_EQ(sh(fmt::format("{} case new --model {}/m --random-prompts 1 --len 16 --seed 1 -o {}/c.h5", bin, dir.string(),
                           dir.string())),
            0);
  ASSERT_EQ(sh(fmt::format("{} golden {}/c.h5", bin, dir.string())), 0);
  EXPECT_EQ(sh(fmt::format("{} run {}/c.h5 --no-reports --set bogus=1", bin, dir.string())), 2);
  EXPECT_EQ(sh(fmt::format("{} run {}/c.h5 --no-reports --set softmax_stats=fp64", bin, dir.string())), 2);
  EXPECT_EQ(sh(fmt::format("{} run {}/c.h5 --no-reports --set 'L42.attn.core:qk_accum=fp16'", bin, dir.string())), 2);
  EXPECT_EQ(sh(fmt::format("{} run {}/c.h5 --no-reports --policy nope", bin, dir.string())), 2);
  EXPECT_LE(sh(fmt::format("{} run {}/c.h5 --no-reports --set 'L01.attn.core:qk_accum=fp16'", bin, dir.string())), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tdiff
