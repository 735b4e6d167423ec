// `tdiff synth` through the built binary: exit codes and one-line errors (DESIGN 6, 10), and
// what an interruption or an earlier SIGKILL leaves beside the output.
#include "cli_support.h"

#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "synth/synth.h"
#include "base/sha256.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class CliSynthTest : public testing::CliTest {};
using Result = testing::CliResult;
std::size_t lines(const std::string& s) { return testing::count_lines(s); }

// Every name under `dir`, recursively (hidden ones too), sorted.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) names.push_back(fs::relative(e.path(), dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

// True when `dir` holds a temporary model folder of `out` with model.safetensors begun.
bool writing_model(const fs::path& dir, const std::string& out) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("." + out + ".tdiff.tmp-", 0) == 0 && fs::exists(e.path() / "model.safetensors"))
      return true;
  return false;
}

// Starts tdiff with `args` (no shell, output discarded), waits until it writes the weights of
// the model folder `dir`/`out`, sends `sig` and returns the wait status (-1: it never did).
int interrupt_synth(const std::vector<std::string>& args, const fs::path& dir, const std::string& out, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(TDIFF_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(TDIFF_BIN, argv.data());
    ::_exit(127);
  }
  bool seen = false;
  for (int i = 0; i < 3000 && !seen; ++i) {
    seen = writing_model(dir, out);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // well inside the weights
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return seen ? status : -1;
}

TEST_F(CliSynthTest, WritesTinyModel) {
  const Result r = run(fmt::format("synth --preset tiny --seed 4 -o '{}'", path("m")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(path("m/config.json")));
  EXPECT_TRUE(fs::exists(path("m/model.safetensors")));
  EXPECT_EQ(r.err, "");
  // --layers keeps the first K layers.
  const Result r2 = run(fmt::format("synth --preset tiny --layers 2 --seed 4 -o '{}'", path("m2")));
  EXPECT_EQ(r2.code, 0) << r2.err;
  EXPECT_FALSE(SafetensorsFile(path("m2/model.safetensors")).has("model.layers.2.input_layernorm.weight"));
  // --config reads a config.json back, and the same seed gives the same bytes.
  const Result r3 = run(fmt::format("synth --config '{}' --seed 4 -o '{}'", path("m/config.json"), path("m3")));
  EXPECT_EQ(r3.code, 0) << r3.err;
  EXPECT_EQ(file_sha256(path("m/model.safetensors")), file_sha256(path("m3/model.safetensors")));
}

TEST_F(CliSynthTest, UnknownPreset) {
  const Result r = run(fmt::format("synth --preset huge --seed 1 -o '{}'", path("m")));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("unknown preset 'huge'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("m")));
}

TEST_F(CliSynthTest, OutputIsAFile) {
  std::ofstream(path("taken")) << "x";
  const Result r = run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("taken")));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("not a folder"), std::string::npos) << r.err;
}

TEST_F(CliSynthTest, OtherBadInput) {
  Result r = run(fmt::format("synth --preset tiny --layers 9 --seed 1 -o '{}'", path("m")));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--layers 9"), std::string::npos) << r.err;
  r = run(fmt::format("synth --config '{}' --seed 1 -o '{}'", path("missing.json"), path("m")));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  r = run(fmt::format("synth --seed 1 -o '{}'", path("m")));
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(path("m")));
}

// config.json values that overflowed 64-bit arithmetic before a check stopped them (issue 19,
// defect 3): exit 2, one line naming the file and the key, no model folder.
TEST_F(CliSynthTest, HugeConfigValuesNameTheKey) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  const nlohmann::json tiny = nlohmann::json::parse(testing::slurp(path("m/config.json")));
  for (const auto& [set, key] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"partial_rotary_factor", 1e300}}, "partial_rotary_factor"},
           {{{"num_attention_heads", std::int64_t{1} << 40}, {"head_dim", std::int64_t{1} << 30}}, "num_attention_heads x head_dim"},
           {{{"hc_mult", std::int64_t{1} << 40}}, "hc_mult"}}) {
    nlohmann::json j = tiny;
    j.erase("qk_rope_head_dim");  // its check against partial_rotary_factor x head_dim would come first
    j.update(set);
    std::ofstream(path("big.json")) << j.dump();
    const Result r = run(fmt::format("synth --config '{}' --seed 1 -o '{}'", path("big.json"), path("out")));
    EXPECT_EQ(r.code, 2) << set.dump() << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(path("big.json") + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(key), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("out")));
  }
}

// SIGINT or SIGTERM while the weights are written, of a new model folder or over an earlier
// model: tdiff dies of that signal and the parent folder is as it was (no temporary, the
// earlier model byte for byte).
TEST_F(CliSynthTest, InterruptedSynthLeavesNothingBehind) {
  ASSERT_EQ(run(fmt::format("synth --preset small --seed 1 -o '{}'", path("m"))).code, 0);
  nlohmann::json big = nlohmann::json::parse(testing::slurp(path("m/config.json")));
  big["vocab_size"] = 262144;  // embedding and lm_head of 256 MiB each: seconds to draw and write
  std::ofstream(path("big.json")) << big.dump();
  const std::string weights = file_sha256(path("m/model.safetensors"));
  const auto before = listing(dir_);
  for (const char* out : {"m", "new"}) {
    for (int sig : {SIGINT, SIGTERM}) {
      const int status =
          interrupt_synth({"synth", "--config", path("big.json"), "--seed", "1", "-o", path(out)}, dir_, out, sig);
      ASSERT_NE(status, -1) << "synth never began the weights of " << out;
      ASSERT_TRUE(WIFSIGNALED(status)) << "synth finished before the signal: make the model larger";
      EXPECT_EQ(WTERMSIG(status), sig);
      EXPECT_EQ(listing(dir_), before) << out << ", signal " << sig;
      EXPECT_EQ(file_sha256(path("m/model.safetensors")), weights);
    }
  }
}

// What a SIGKILLed synth left beside its output (a temporary folder whose process is gone) is
// removed before the next synth there writes; a live process's temporary stays.
TEST_F(CliSynthTest, StaleTemporaryFoldersBesideTheOutputAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // its pid now belongs to no process
  const std::string stale = path(fmt::format(".m.tdiff.tmp-{}-0badc0de", child));
  const std::string live = path(fmt::format(".m.tdiff.tmp-{}-0badc0de", ::getpid()));
  for (const auto& d : {stale, live}) {
    fs::create_directories(d);
    std::ofstream(d + "/model.safetensors") << "half";
  }
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(path("m/model.safetensors")));
}

// A synth SIGKILLed while it writes the weights cannot clean up: its temporary folder stays
// beside the output until the next synth into that folder, of any output name, removes it
// (issue 39, item 3, defect i).
TEST_F(CliSynthTest, SigkilledSynthTemporaryIsRemovedByTheNextSynth) {
  ASSERT_EQ(run(fmt::format("synth --preset small --seed 1 -o '{}'", path("m"))).code, 0);
  nlohmann::json big = nlohmann::json::parse(testing::slurp(path("m/config.json")));
  big["vocab_size"] = 262144;  // seconds to write, as in InterruptedSynthLeavesNothingBehind
  std::ofstream(path("big.json")) << big.dump();
  const int status =
      interrupt_synth({"synth", "--config", path("big.json"), "--seed", "1", "-o", path("new")}, dir_, "new", SIGKILL);
  ASSERT_NE(status, -1) << "synth never began the weights";
  ASSERT_TRUE(WIFSIGNALED(status)) << "synth finished before the signal: make the model larger";
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto temporaries = [&] {
    std::vector<std::string> t;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tdiff.tmp-") != std::string::npos)
        t.push_back(e.path().filename().string());
    return t;
  };
  ASSERT_EQ(temporaries().size(), 1u) << "what SIGKILL leaves";
  EXPECT_FALSE(fs::exists(path("new")));
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("other"))).code, 0);
  EXPECT_EQ(temporaries(), std::vector<std::string>{});
  EXPECT_TRUE(fs::exists(path("other/model.safetensors")));
}

TEST_F(CliSynthTest, HelpHasAnExample) {
  const Result r = run("synth --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("tdiff synth --preset tiny --seed 1"), std::string::npos) << r.out;
}

// --outliers prints the token ids and channels it planted (synth_outliers).
TEST(SynthCli, OutliersFlagPrintsIdsAndChannels) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tdiff-synth-outliers-{}", ::getpid());
  fs::remove_all(dir);
  const std::string cmd = fmt::format("{} synth --preset tiny --outliers --seed 1 -o {}/m > {}.out 2>&1", TDIFF_BIN,
                                      dir.string(), dir.string());
  ASSERT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  std::ifstream f(dir.string() + ".out");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const SynthOutliers o = synth_outliers(synth_preset("tiny"), 1);
  EXPECT_NE(text.find(fmt::format("outliers: token ids {} {} carry", o.token_ids[0], o.token_ids[1])), std::string::npos)
      << text;
  fs::remove_all(dir);
  fs::remove(dir.string() + ".out");
}

}  // namespace
}  // namespace tdiff
