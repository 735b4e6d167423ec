// Defects of flags, names and configs, each through the binary (issue 39, item 3): a config
// number JSON cannot hold on every path a config is read, ci's report and cache folders on a
// failure, run ids that are not plain names, --stages globs that match nothing, compare's
// floors, a release's quantization_config, and ci --prepare with a damaged cache. Each bad
// input is exit 2 with one line naming the flag, key or file, and leaves nothing behind.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <chrono>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "cli_support.h"
#include "tmpfs.h"
#include "mini_suite.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::count_lines;

int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

// Exit 2 and one line on stderr, holding `what`.
void expect_refused(const CliResult& r, const std::string& what, const std::string& args = "") {
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("tdiff: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << args << "\n" << r.err;
}

using testing::listing;

using testing::Tmpfs;

class DefectSuites : public testing::MiniSuite {};

// The tiny model and a case of it with its reference.
class OpenDefects : public testing::CliTest {
 protected:
  void make_case(const std::string& model = "m", const std::string& c = "c.h5", int seed = 1) {
    if (!fs::exists(path(model))) {
      ASSERT_EQ(run(fmt::format("synth --preset tiny --seed {} -o '{}'", seed, path(model))).code, 0);
    }
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 12 --seed {} -o '{}'", path(model), seed,
                              path(c)))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path(c))).code, 0);
  }
  // Runs tdiff in the test's folder (reports/ lands there).
  CliResult run_here(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = sh(fmt::format("cd '{}' && '{}' {} >'{}' 2>'{}'", dir_.string(), TDIFF_BIN, args, out, err));
    CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::slurp(out), testing::slurp(err)};
    fs::remove(out);
    fs::remove(err);
    return r;
  }
};

// "rms_norm_eps": 1e999 in a config's text, as a user's editor would leave it.
std::string with_overflow(const std::string& config_text) {
  const auto brace = config_text.find('{');
  return config_text.substr(0, brace + 1) + "\"rms_norm_eps\": 1e999, " + config_text.substr(brace + 1);
}

// Defect a: a number JSON cannot hold (1e999) was exit 3 on the paths that parsed config text
// without catching nlohmann's out_of_range: case new from an HF or a release folder, and a
// case's stored model_config read by golden, info and compare of a saved run.
TEST_F(OpenDefects, ConfigNumberOutOfRangeIsOneLineOnEveryPath) {
  make_case();
  ASSERT_EQ(
      run(fmt::format("run '{}' --no-record --no-reports --save-to '{}' --run-id r1", path("c.h5"), path("s.h5"))).code,
      0);
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --seed 1 -o '{}'", path("rel"))).code, 0);
  const std::string hf_text = testing::slurp(path("m/config.json"));
  std::ofstream(path("big.json")) << with_overflow(hf_text);
  expect_refused(run(fmt::format("synth --config '{}' --seed 1 -o '{}'", path("big.json"), path("m2"))),
                 "big.json: not valid JSON");
  for (const char* folder : {"m", "rel"}) {
    const std::string config = path(folder) + "/config.json", text = testing::slurp(config);
    std::ofstream(config) << with_overflow(text);
    expect_refused(run(fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 1 -o '{}'", path(folder),
                                   path("new.h5"))),
                   config + ": not valid JSON", folder);
    EXPECT_FALSE(fs::exists(path("new.h5")));
    std::ofstream(config) << text;
  }
  {
    H5Writer w(path("c.h5"), path("c.h5"));
    w.set_attr("/", "model_config", with_overflow(hf_text));
    w.commit();
  }
  for (const std::string& args :
       {fmt::format("golden '{}'", path("c.h5")), fmt::format("info '{}'", path("c.h5")),
        fmt::format("compare '{}' '{}' --group-b /runs/r1 --no-reports", path("c.h5"), path("s.h5"))})
    expect_refused(run(args), "model_config", args);
}

// Defect a: numbers that parse but no model has (zero, negative, a loop of 10^9 iterations)
// name their key and its range.
TEST_F(OpenDefects, ConfigValuesOutsideTheirRangeNameTheKey) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
  const auto tiny = nlohmann::json::parse(testing::slurp(path("m/config.json")));
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"rms_norm_eps", 0, "rms_norm_eps is 0, it must be in (0, 1]"},
           {"rms_norm_eps", 5, "rms_norm_eps is 5, it must be in (0, 1]"},
           {"hc_sinkhorn_iters", 1000000000, "hc_sinkhorn_iters is 1000000000, it must be in [1, 1000]"},
           {"hidden_size", -64, "hidden_size is -64, it must be >= 1"},
           {"routed_scaling_factor", -1.5, "routed_scaling_factor is -1.5, it must be > 0"},
           {"max_position_embeddings", 0, "max_position_embeddings is 0, it must be >= 1"}}) {
    nlohmann::json j = tiny;
    j[key] = value;
    std::ofstream(path("m/config.json")) << j.dump();
    expect_refused(
        run(fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 1 -o '{}'", path("m"), path("c.h5"))),
        path("m/config.json") + ": " + says, key);
    EXPECT_FALSE(fs::exists(path("c.h5")));
  }
}

// Defect b: ci's -o folder that cannot be created was exit 3 (a filesystem_error); a ci that
// fails after creating its report folder or cache left them behind.
// A folder where the run history of the set's cache would be: a ci run there fails when it
// opens the history, after its report folder was made (read-only files stop no root).
void block_history(const std::string& cache) {
  for (const char* f : {"tdiff-history.sqlite", "tdiff-history.sqlite-wal", "tdiff-history.sqlite-shm"})
    fs::remove(cache + "/" + f);
  fs::create_directory(cache + "/tdiff-history.sqlite");
}

TEST_F(DefectSuites, CiReportAndCacheFoldersAreUndoneOnFailure) {
  write_suite();
  const std::string ci = fmt::format("ci '{}' --policy fp32 --repeat 1 --cases right", dir_.string());
  expect_refused(run(fmt::format("{} --cache '{}' -o /dev/null/x", ci, path("cache"))),
                 "-o /dev/null/x: cannot create the report folder (Not a directory)");

  // A run history that cannot be written (a folder in its place): the report folder made for
  // the run goes again.
  ASSERT_EQ(run(fmt::format("{} --cache '{}' -o '{}'", ci, path("cache"), path("r1"))).code, 0);
  std::string key;
  for (const auto& e : fs::directory_iterator(path("cache")))
    if (e.is_directory()) key = e.path().string();
  ASSERT_FALSE(key.empty());
  block_history(path("cache"));
  const CliResult ro = run(fmt::format("{} --cache '{}' -o '{}'", ci, path("cache"), path("out/r2")));
  EXPECT_EQ(ro.code, 2) << ro.out << ro.err;
  EXPECT_NE(ro.err.find("tdiff-history.sqlite: cannot open it"), std::string::npos) << ro.err;
  EXPECT_FALSE(fs::exists(path("out"))) << "the report folder and the parent ci made";

  // A full disk while the cache is built: no cache tree, no report folder.
  Tmpfs disk(dir_ / "disk", "256k");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cache = (disk.dir / "cache").string(), out = (disk.dir / "r3").string();
  const CliResult full = run(fmt::format("{} --cache '{}' -o '{}'", ci, cache, out));
  EXPECT_EQ(full.code, 2) << full.out << full.err;
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  EXPECT_EQ(count_lines(full.err.substr(full.err.find("tdiff: error: "))), 1u) << full.err;
  EXPECT_EQ(listing(disk.dir), std::vector<std::string>{}) << "left behind";
}

// Defect b: a failing ci removed the top-most folder it had seen missing before it made it,
// though another run may have made its own folder there since (two runs starting together, or
// one waiting on the cache lock); only folders its own mkdir made go, each while empty.
TEST_F(DefectSuites, CiFailureKeepsAnotherRunsFolders) {
  write_suite();
  const std::string ci =
      fmt::format("ci '{}' --policy fp32 --repeat 1 --cases right --cache '{}'", dir_.string(), path("cache"));
  ASSERT_EQ(run(fmt::format("{} -o '{}'", ci, path("r1"))).code, 0);
  std::string key;
  for (const auto& e : fs::directory_iterator(path("cache")))
    if (e.is_directory()) key = e.path().string();
  ASSERT_FALSE(key.empty());
  block_history(path("cache"));

  // The cache lock held here: the run makes out/r2, then waits; meanwhile another run's report
  // lands in out/, made by the waiting run.
  const int fd = ::open(path("cache/lock").c_str(), O_RDWR | O_CLOEXEC);  // not held by the run itself
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto waiting = std::async(std::launch::async, [&] { return run(fmt::format("{} -o '{}'", ci, path("out/r2"))); });
  for (int i = 0; i < 600 && !fs::exists(path("out/r2")); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(fs::exists(path("out/r2")));
  fs::create_directories(path("out/other"));
  std::ofstream(path("out/other/index.html")) << "another run's report\n";
  ::close(fd);  // lets the lock go
  const CliResult r = waiting.get();
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("tdiff-history.sqlite: cannot open it"), std::string::npos) << r.err;
  EXPECT_EQ(listing(path("out")), (std::vector<std::string>{"other", "other/index.html"}));
}

// Defect b: ci's cache code called the std::filesystem functions that throw, so a path the
// system refuses (a name too long, a folder in a file's place) was exit 3, "internal error".
TEST_F(DefectSuites, CiCachePathsTheSystemRefusesAreOneLine) {
  write_suite();
  const std::string long_name = path(std::string(300, 'a') + "/cache");
  expect_refused(run(fmt::format("ci '{}' --prepare --cache '{}'", dir_.string(), long_name)),
                 "cannot create the cache folder " + long_name + " (File name too long)");

  const std::string prepare = fmt::format("ci '{}' --prepare --cache '{}'", dir_.string(), path("cache"));
  ASSERT_EQ(run(prepare).code, 0);
  std::string key;
  for (const auto& e : fs::directory_iterator(path("cache")))
    if (e.is_directory()) key = e.path().string();
  ASSERT_FALSE(key.empty());
  fs::resize_file(key + "/right.h5", 3000);  // built again, so COMPLETE goes first
  fs::remove(key + "/COMPLETE");
  fs::create_directories(key + "/COMPLETE/x");
  const CliResult r = run(prepare);  // stderr: "building right.h5 again", then the error
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  const auto at = r.err.find("tdiff: error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.substr(at),
            "tdiff: error: " + key + "/COMPLETE: cannot remove it from the cache (Directory not empty)\n");
}

// Defect c: --run-id ../../esc wrote its report outside reports/, and a/b nested groups in the
// case; every command that takes --run-id refuses such a name before any work, and ids read
// back from a case are shown escaped: a case an earlier tdiff wrote may hold one ("nightly 1").
TEST_F(OpenDefects, RunIdsArePlainNames) {
  make_case();
  const std::string c = path("c.h5");
  for (const char* id : {"../../esc", "a/b", "..", ".hidden", "nightly 1"}) {
    for (const std::string& cmd :
         {fmt::format("run '{}' --no-record", c), fmt::format("compare '{}' '{}'", c, c),
          fmt::format("determinism '{}' --runs 2", c), fmt::format("bisect '{}'", c), fmt::format("audit '{}'", c)}) {
      const std::string args = fmt::format("{} --run-id '{}'", cmd, id);
      expect_refused(run_here(args), fmt::format("--run-id \"{}\" is not a plain name", id), args);
    }
  }
  expect_refused(run_here(fmt::format("compare '{}' '{}' --case ../x", c, c)), "--case \"../x\" is not a plain name");
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{"c.h5", "m", "m/config.json", "m/model.safetensors"}));
  EXPECT_FALSE(fs::exists(dir_.parent_path().parent_path() / "esc"));

  // One that is a plain name works, and what it wrote is under reports/<case>/<run-id>.
  ASSERT_EQ(run_here(fmt::format("run '{}' --no-record --run-id r.1_a-b", c)).code, 0);
  EXPECT_TRUE(fs::exists(path("reports/c/r.1_a-b/report.json")));

  // Ids in the case file that are not plain names (another tool's, an earlier tdiff's): listed
  // escaped, each with a note, and the case is still read.
  {
    H5Writer w(c, c);
    w.set_attr("/env/.. \x1b[2J", "backend", "x");
    w.set_attr("/env/nightly 1", "backend", "x");
    w.set_attr("/runs/nightly 1", "kind", "run");
    w.commit();
  }
  const CliResult info = run(fmt::format("info '{}'", c));
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_EQ(info.err, "");
  EXPECT_EQ(info.out.find('\x1b'), std::string::npos) << "a control character reached the terminal";
  EXPECT_NE(info.out.find(" \".. \\x1b[2J\"  "), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("\"nightly 1\"  "), std::string::npos) << info.out;  // its record, in the history
  for (const char* shown : {"\".. \\x1b[2J\"", "\"nightly 1\""})
    EXPECT_NE(info.out.find(fmt::format("note: run id {} is not a plain name; shown escaped\n", shown)),
              std::string::npos)
        << info.out;
  EXPECT_EQ(count_lines(info.out.substr(info.out.find("note: "))), 2u) << "one note per id, /env and /runs alike";
}

// Defect d: a --stages list with one glob that matches nothing ran on the others without a
// word; each glob must match a stage.
TEST_F(OpenDefects, EveryStagesGlobMustMatchAStage) {
  make_case();
  const std::string c = path("c.h5"), globs = "'L00.attn.*,L99.*'";
  for (const std::string& args : {fmt::format("golden '{}' --stages {}", c, globs),
                                  fmt::format("run '{}' --no-record --no-reports --stages {}", c, globs),
                                  fmt::format("determinism '{}' --runs 2 --no-reports --stages {}", c, globs),
                                  fmt::format("info '{}' --stages {}", c, globs)})
    expect_refused(
        run(args),
        "--stages 'L00.attn.*,L99.*': 'L99.*' matches no stage of this model (`tdiff info CASE --stages` lists them)",
        args);
  EXPECT_EQ(run(fmt::format("info '{}' --stages {}", c, globs)).out, "") << "refused before the first line";
  EXPECT_EQ(run(fmt::format("run '{}' --no-record --no-reports --stages 'L00.attn.*,lm_head'", c)).code, 0);
}

// Defect e: compare took --rel-floor nan or -1, and a noise floor made on another model, other
// weights or other inputs.
TEST_F(OpenDefects, CompareFloorsAreChecked) {
  make_case();
  const std::string c = path("c.h5"), same = fmt::format("compare '{}' '{}' --no-reports", c, c);
  for (const char* v : {"nan", "-1", "0", "inf"})
    expect_refused(run(fmt::format("{} --rel-floor {}", same, v)),
                   fmt::format("--rel-floor {}: must be a finite number > 0", v));
  EXPECT_EQ(run(same + " --rel-floor 1e-6").code, 0);

  make_case("m2", "weights.h5", 2);  // the same config, other weights
  make_case("m", "inputs.h5", 3);    // the same model, other prompts
  ASSERT_EQ(run(fmt::format("synth --preset tiny --layers 2 --seed 1 -o '{}'", path("m3"))).code, 0);
  make_case("m3", "model.h5", 1);  // another config
  for (const auto& [floor, says] : std::vector<std::pair<std::string, std::string>>{
           {"weights.h5", "made on other weights (model.safetensors recorded by"},
           {"inputs.h5", "made on other inputs (the token ids of"},
           {"model.h5", "made on another model (the model_config of"}})
    expect_refused(run(fmt::format("{} --floor '{}'", same, path(floor))), "--floor " + path(floor) + ": " + says,
                   floor);
  EXPECT_EQ(run(fmt::format("{} --floor '{}'", same, c)).code, 0);
}

// Defect f: a release folder's quantization_config was never read; it must state the storage
// the tensors have (FP8 e4m3 in 128 x 128 blocks with UE8M0 scales, FP4 experts).
TEST_F(OpenDefects, ReleaseQuantizationConfigMustMatchTheTensors) {
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --seed 1 -o '{}'", path("rel"))).code, 0);
  const std::string config = path("rel/config.json"), text = testing::slurp(config);
  const auto good = nlohmann::json::parse(text);
  const std::string case_new =
      fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 1 -o '{}'", path("rel"), path("c.h5"));
  struct Change {
    std::string key;
    nlohmann::json value;  // null: the key removed
    std::string says;
  };
  for (const Change& ch : std::vector<Change>{
           {"quant_method", "awq", "quantization_config.quant_method is \"awq\"; tdiff reads the release's \"fp8\""},
           {"fmt", "e5m2", "quantization_config.fmt is \"e5m2\"; tdiff reads the release's \"e4m3\""},
           {"scale_fmt", "e4m3", "quantization_config.scale_fmt is \"e4m3\"; tdiff reads the release's \"ue8m0\""},
           {"weight_block_size",
            {64, 64},
            "quantization_config.weight_block_size is [64,64]; tdiff reads the release's [128,128]"},
           {"", nullptr, "no quantization_config, but tensor '"},
           {"expert_dtype", "bf16",
            "expert_dtype is \"bf16\", but tensor 'layers.0.ffn.experts.0.w2.weight' holds FP4 codes"}}) {
    nlohmann::json j = good;
    if (ch.key.empty())
      j.erase("quantization_config");
    else if (ch.key == "expert_dtype")
      j[ch.key] = ch.value;
    else
      j["quantization_config"][ch.key] = ch.value;
    std::ofstream(config) << j.dump(2);
    expect_refused(run(case_new), config + ": " + ch.says, ch.key);
    EXPECT_FALSE(fs::exists(path("c.h5")));
  }
  std::ofstream(config) << text;
  EXPECT_EQ(run(case_new).code, 0);
}

// Defect h: ci --prepare listed a cached case that was gone or cut short as ready; such a part
// is built again (and said so) before it is listed.
TEST_F(DefectSuites, CiPrepareRebuildsAMissingOrTruncatedCase) {
  write_suite();
  const std::string prepare = fmt::format("ci '{}' --prepare --cache '{}'", dir_.string(), path("cache"));
  ASSERT_EQ(run(prepare).code, 0);
  std::string key;
  for (const auto& e : fs::directory_iterator(path("cache")))
    if (e.is_directory()) key = e.path().string();
  ASSERT_FALSE(key.empty());
  fs::resize_file(key + "/right.h5", 3000);
  fs::remove(key + "/left.h5");
  const CliResult r = run(prepare);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("right.h5 again: the cached copy is damaged (" + key +
                       "/right.h5: the case file is damaged: it is truncated"),
            std::string::npos)
      << r.err;
  fs::resize_file(key + "/model/model.safetensors", 1000);  // the model's files keep their sizes
  const CliResult model = run(prepare);
  ASSERT_EQ(model.code, 0) << model.err;
  EXPECT_NE(model.err.find("model again: the cached copy is damaged (model/model.safetensors has 1000 bytes"),
            std::string::npos)
      << model.err;
  EXPECT_NE(r.err.find("left.h5 again: the cached copy is damaged (left.h5 is missing)"), std::string::npos) << r.err;
  for (const char* name : {"right", "left"}) {
    EXPECT_NE(r.out.find(fmt::format("{}\t{}/{}.h5", name, key, name)), std::string::npos) << r.out;
    EXPECT_NO_THROW(read_case(fmt::format("{}/{}.h5", key, name)));
    EXPECT_FALSE(reference_stages(fmt::format("{}/{}.h5", key, name)).empty());
  }
  // Whole again: reused, nothing built.
  const CliResult again = run(prepare);
  EXPECT_EQ(again.err.find("building"), std::string::npos) << again.err;
}

}  // namespace
}  // namespace tdiff
