// Files tdiff writes, under real trouble, through the binary: a full disk (a small tmpfs), a
// read-only folder (a read-only mount), read-only and unreadable cases, SIGINT/SIGTERM in the
// middle of golden and run, temporaries a killed tdiff left, weights changed after the case
// was made, and inputs that must not be read (suite files outside the suite's folder) or
// accepted (NaN weights). Each checks exit 2 with one line naming the file, and that nothing
// was left behind or changed (the folder's listing, the file's bytes and mode).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "cli_support.h"
#include "history_support.h"
#include "tmpfs.h"
#include "casefile/h5io.h"
#include "formats/safetensors.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::count_lines;

using testing::listing;

std::string bytes_of(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

unsigned mode_of(const std::string& f) {
  struct stat st {};
  return ::stat(f.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

using testing::Tmpfs;

class FilesCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 20 --seed 5 -o '{}'", path("m"), path("c.h5")))
                  .code,
              0);
  }
  // The error of a failed command: exit 2 and one line naming `what`, the last on stderr
  // (progress lines of the work done before may precede it).
  void expect_one_line(const CliResult& r, const std::string& what) const {
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    const auto start = r.err.rfind('\n', r.err.size() >= 2 ? r.err.size() - 2 : 0);
    const std::string last = r.err.substr(start == std::string::npos ? 0 : start + 1);
    EXPECT_EQ(last.rfind("tdiff: error: ", 0), 0u) << r.err;
    EXPECT_EQ(count_lines(last), 1u) << r.err;
    EXPECT_EQ(r.err.find("tdiff: error: "), r.err.size() - last.size()) << "more than one error line:\n" << r.err;
    EXPECT_NE(last.find(what), std::string::npos) << r.err;
  }
  CliResult as_nobody(const std::string& args) const {
    return run_with_prefix("setpriv --reuid=nobody --regid=nogroup --clear-groups", args);
  }
  CliResult run_with_prefix(const std::string& prefix, const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = sh(fmt::format("{} '{}' {} >'{}' 2>'{}'", prefix, TDIFF_BIN, args, out, err));
    CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::slurp(out), testing::slurp(err)};
    fs::remove(out);
    fs::remove(err);
    return r;
  }
};

TEST_F(FilesCli, FullDiskCaseNewLeavesNothingAndSaysOneLine) {
  Tmpfs disk(dir_ / "disk", "1M");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  disk.fill();
  const auto before = listing(disk.dir);
  const std::string out = (disk.dir / "new.h5").string();
  const CliResult r = run(fmt::format("case new --model '{}' --random-prompts 2 --len 20 --seed 5 -o '{}'", path("m"), out));
  expect_one_line(r, out);
  EXPECT_EQ(listing(disk.dir), before);
}

TEST_F(FilesCli, FullDiskRunReportLeavesNoFolderAndTheCaseAlone) {
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  Tmpfs disk(dir_ / "disk", "1M");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  disk.fill();
  const auto before = listing(disk.dir);
  const std::string case_bytes = bytes_of(path("c.h5"));
  const std::string out = (disk.dir / "reports" / "r1").string();
  const CliResult r = run(fmt::format("run '{}' --no-record -o '{}'", path("c.h5"), out));
  expect_one_line(r, "report");
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(listing(disk.dir), before);  // neither reports/ nor reports/r1 nor a temporary
  EXPECT_EQ(bytes_of(path("c.h5")), case_bytes);
}

// A case on a read-only mount: the run history beside it cannot be made, so the run fails before
// it computes or writes a report; with --no-record (or --history elsewhere) it runs and leaves
// the case as it was.
TEST_F(FilesCli, CaseThatCannotBeUpdatedFailsBeforeReports) {
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  Tmpfs disk(dir_ / "ro", "8M");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string c = (disk.dir / "c.h5").string();
  fs::copy_file(path("c.h5"), c);
  if (!disk.read_only()) GTEST_SKIP() << "cannot remount the tmpfs read-only";
  const std::string case_bytes = bytes_of(c);
  const CliResult r = run(fmt::format("run '{}' -o '{}'", c, path("rep")));
  expect_one_line(r, (disk.dir / "tdiff-history.sqlite").string());
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("rep")));
  EXPECT_EQ(r.out.find("verdict"), std::string::npos) << "ran before failing:\n" << r.out;

  const CliResult ok = run(fmt::format("run '{}' --no-record -o '{}'", c, path("rep")));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(path("rep/report.html")));
  const CliResult elsewhere = run(fmt::format("run '{}' --history '{}' --no-reports", c, path("h.sqlite")));
  EXPECT_EQ(elsewhere.code, 0) << elsewhere.err;
  EXPECT_EQ(bytes_of(c), case_bytes);
  EXPECT_EQ(listing(disk.dir), std::vector<std::string>{"c.h5"});
}

// Too little space for the case's copy (run --save) or for the run history: said before the
// candidate runs, not after it, and nothing is left behind.
TEST_F(FilesCli, CaseUpdateThatCannotFitFailsBeforeTheRun) {
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  Tmpfs disk(dir_ / "disk", "6M");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string c = (disk.dir / "c.h5").string();
  fs::copy_file(path("c.h5"), c);
  std::ofstream((disk.dir / "filler").string(), std::ios::binary) << std::string(3u << 20, 'x');
  const auto before = listing(disk.dir);
  const std::string case_bytes = bytes_of(c);
  const CliResult r = run(fmt::format("run '{}' --save --no-record -o '{}'", c, (disk.dir / "rep").string()));
  expect_one_line(r, c + ": ");
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // nothing ran
  EXPECT_EQ(listing(disk.dir), before);
  EXPECT_EQ(bytes_of(c), case_bytes);
  std::ofstream((disk.dir / "filler2").string(), std::ios::binary) << std::string(6u << 20, 'x');  // as full as it gets
  const auto full = listing(disk.dir);
  const CliResult h = run(fmt::format("run '{}' -o '{}'", c, (disk.dir / "rep").string()));
  expect_one_line(h, (disk.dir / "tdiff-history.sqlite").string());
  EXPECT_EQ(h.out, "");
  EXPECT_EQ(listing(disk.dir), full) << "a history that could not be made is not left half made";
}

// chmod 0444 says "do not change": golden and run --save refuse, a run (which only reads the
// case) runs; the bytes and the mode stay. Other modes are kept across an update.
TEST_F(FilesCli, ReadOnlyCaseIsRefusedAndModesAreKept) {
  const std::string c = path("c.h5");
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  fs::permissions(c, fs::perms(0444));
  const std::string case_bytes = bytes_of(c);
  expect_one_line(run(fmt::format("golden '{}'", c)), c + ": the file is read-only (mode 0444)");
  const CliResult r = run(fmt::format("run '{}' --save -o '{}'", c, path("rep")));
  expect_one_line(r, c + ": the file is read-only (mode 0444)");
  EXPECT_FALSE(fs::exists(path("rep")));
  EXPECT_EQ(run(fmt::format("run '{}' --no-reports", c)).code, 0);
  EXPECT_EQ(bytes_of(c), case_bytes);
  EXPECT_EQ(mode_of(c), 0444u);

  fs::permissions(c, fs::perms(0640));
  ASSERT_EQ(run(fmt::format("run '{}' --save --no-reports", c)).code, 0);
  EXPECT_NE(bytes_of(c), case_bytes);  // the tensors were saved
  EXPECT_EQ(mode_of(c), 0640u);
}

TEST_F(FilesCli, UnreadableCaseSaysPermissionDenied) {
  const std::string c = path("c.h5");
  fs::permissions(c, fs::perms(0600));
  if (as_nobody("--version").code != 0) GTEST_SKIP() << "cannot run tdiff as user nobody (setpriv)";
  const CliResult r = as_nobody(fmt::format("info '{}'", c));
  expect_one_line(r, c + ": cannot read the file (Permission denied)");
}

// Starts tdiff with `args` (no shell), waits until a file whose name starts with `prefix`
// appears in `dir`, sends `sig` and returns the wait status (-1: the file never appeared).
int interrupt_when_temp_appears(const std::vector<std::string>& args, const fs::path& dir, const std::string& prefix, int sig) {
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
  // Up to a minute: a run does its measured floor and systematic fits before it records.
  for (int i = 0; i < 12000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(dir)) seen = seen || e.path().filename().string().rfind(prefix, 0) == 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // well inside the work
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return seen ? status : -1;
}

TEST_F(FilesCli, SignalsDuringGoldenAndRunRemoveTheTemporaries) {
  // A case that takes a few seconds to compute.
  const std::string c = path("big.h5");
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 32 --len 128 --seed 5 -o '{}'", path("m"), c)).code, 0);
  const auto before = listing(dir_);
  const std::string case_bytes = bytes_of(c);
  for (int sig : {SIGINT, SIGTERM}) {
    const int status = interrupt_when_temp_appears({"golden", c}, dir_, ".big.h5.tdiff.tmp-", sig);
    ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << "golden finished before the signal: make the case larger";
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(listing(dir_), before);
    EXPECT_EQ(bytes_of(c), case_bytes);
  }
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  const std::string golden_bytes = bytes_of(c);
  const auto with_ref = listing(dir_);
  // A run --save writes the candidate's tensors into a copy of the case as they come, then its
  // reports: interrupted while the copy exists, the case is as it was and nothing else is left
  // but the reports written by then (the run history is left out here: --no-record).
  const int status =
      interrupt_when_temp_appears({"run", c, "--save", "--no-record", "-o", path("rep")}, dir_, ".big.h5.tdiff.tmp-", SIGTERM);
  ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << "run finished before the signal";
  auto left = listing(dir_);
  left.erase(std::remove_if(left.begin(), left.end(), [](const std::string& f) { return f.rfind("rep", 0) == 0; }), left.end());
  EXPECT_EQ(left, with_ref);
  EXPECT_EQ(bytes_of(c), golden_bytes);
}

// What SIGKILL leaves (the temporaries of a process that no longer exists, files or folders)
// is removed by the next command that writes in the same folder; a live process's temporary
// and a name outside the scheme are left alone.
TEST_F(FilesCli, StaleTemporariesOfDeadProcessesAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // its pid now belongs to no process
  const std::string dead = path(fmt::format(".c.h5.tdiff.tmp-{}-0badc0de", child));
  const std::string live = path(fmt::format(".c.h5.tdiff.tmp-{}-0badc0de", ::getpid()));
  const std::string other = path(".c.h5.tdiff.tmp-notours");
  for (const auto& f : {dead, live, other}) std::ofstream(f) << "x";
  const std::string dead_folder = path(fmt::format(".rep.tdiff.tmp-{}-12345678", child));
  fs::create_directories(dead_folder + "/sub");
  std::ofstream(dead_folder + "/report.csv") << "x";
  ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_FALSE(fs::exists(dead_folder));  // any writer in the folder removes them
  ASSERT_EQ(run(fmt::format("run '{}' -o '{}'", path("c.h5"), path("rep"))).code, 0);
  EXPECT_TRUE(fs::exists(path("rep/report.csv")));
}

// The weights are replaced by another model's of the same shapes: golden and run refuse,
// naming the file; --force goes on and says so in the run's record.
TEST_F(FilesCli, ChangedWeightsAreCaughtUnlessForced) {
  const std::string c = path("c.h5");
  ASSERT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 3 -o '{}'", path("m3"))).code, 0);
  fs::copy_file(path("m3/model.safetensors"), path("m/model.safetensors"), fs::copy_options::overwrite_existing);
  const std::string case_bytes = bytes_of(c);
  const std::string weights = path("m/model.safetensors");
  expect_one_line(run(fmt::format("golden '{}'", c)), weights + ": its header or sampled bytes differ");
  expect_one_line(run(fmt::format("run '{}' --no-reports", c)), weights);
  EXPECT_EQ(bytes_of(c), case_bytes);
  const CliResult forced = run(fmt::format("run '{}' --no-reports --force", c));
  EXPECT_NE(forced.code, 2) << forced.err;
  EXPECT_NE(forced.err.find("going on (--force)"), std::string::npos) << forced.err;
  EXPECT_EQ(bytes_of(c), case_bytes) << "a forced run rewrote the case";
  const auto runs = testing::recorded_runs(c);
  ASSERT_FALSE(runs.empty());
  EXPECT_NE(runs.back().env.extra.at("weights").find("forced: " + weights), std::string::npos);  // its environment record

  // golden --force makes a reference of the new weights, so the case records them from then on:
  // a run on them passes the check, and one on the weights the case was made from does not.
  ASSERT_EQ(run(fmt::format("golden '{}' --force", c)).code, 0);
  EXPECT_EQ(run(fmt::format("run '{}' --no-reports", c)).code, 0);
  ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m2"))).code, 0);
  fs::copy_file(path("m2/model.safetensors"), weights, fs::copy_options::overwrite_existing);
  expect_one_line(run(fmt::format("run '{}' --no-reports", c)), weights + ": its header or sampled bytes differ");
}

// An edit that keeps the size, misses the sampled blocks and restores the time passes the
// quick check (documented) and is caught by --verify-weights full; a touched file is hashed.
TEST_F(FilesCli, FullVerificationCatchesWhatTheQuickCheckCannot) {
  const std::string c = path("c.h5"), weights = path("m/model.safetensors");
  const auto size = fs::file_size(weights);
  const auto mtime = fs::last_write_time(weights);
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    // Between the fingerprint's samples 7 and 8 (formats/weight_files.cpp: 16 blocks of 64 KiB).
    const std::uintmax_t q = (size - (64u << 10)) / 15;
    ASSERT_GT(q, (64u << 10) + 16) << "the model file is too small for a gap between samples";
    f.seekg(static_cast<std::streamoff>(7 * q + (64u << 10) + (q - (64u << 10)) / 2));
    char b = 0;
    f.read(&b, 1);
    f.seekp(f.tellg() - std::streamoff{1});
    b = static_cast<char>(b ^ 1);
    f.write(&b, 1);
  }
  fs::last_write_time(weights, mtime);
  EXPECT_EQ(run(fmt::format("golden '{}' --stages embed", c)).code, 0);
  expect_one_line(run(fmt::format("golden '{}' --verify-weights full", c)), weights + ": its SHA-256 differs");
  fs::last_write_time(weights, mtime + std::chrono::seconds(5));  // touched: the quick check hashes it
  expect_one_line(run(fmt::format("golden '{}'", c)), weights + ": its SHA-256 differs");
}

TEST_F(FilesCli, NonFiniteWeightIsRefusedWhenTheCaseIsMade) {
  const std::string m = path("m/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    SafetensorsFile f(m);
    for (const auto& name : f.names()) {
      Tensor t = f.tensor(name).clone();
      if (name == "lm_head.weight") {
        Tensor nan = t.to(DType::f32);
        nan.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
        t = nan.to(t.dtype());
      }
      tensors.emplace_back(name, std::move(t));
    }
  }
  write_safetensors(m, tensors);
  const auto before = listing(dir_);
  const CliResult r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 4 --seed 1 -o '{}'", path("m"), path("n.h5")));
  expect_one_line(r, "weight 'lm_head.weight' holds a non-finite value");
  EXPECT_EQ(listing(dir_), before);
}

// A suite may only name files in its own folder; an error about a token file never shows
// the file's contents.
TEST_F(FilesCli, SuiteFilesOutsideTheSuiteFolderAreRefused) {
  fs::create_directories(path("suite"));
  auto write_suite = [&](const std::string& tokens) {
    std::ofstream(path("suite/suite.toml")) << fmt::format(
        "name = \"s\"\ntokens = \"{}\"\n[model]\npreset = \"tiny\"\nseed = 1\n[[case]]\nname = \"a\"\nprompts = [1]\nseed = 1\n",
        tokens);
  };
  std::ofstream(path("secret.txt")) << "hunter2 is the password\n";
  write_suite("../secret.txt");
  CliResult r = run(fmt::format("ci '{}' -o '{}'", path("suite"), path("out")));
  expect_one_line(r, path("suite/suite.toml") + ": tokens = \"../secret.txt\" is outside the suite's folder");
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
  write_suite("/etc/passwd");
  expect_one_line(run(fmt::format("ci '{}' -o '{}'", path("suite"), path("out"))), "is outside the suite's folder");
  fs::create_symlink(path("secret.txt"), path("suite/link.txt"));
  write_suite("link.txt");
  expect_one_line(run(fmt::format("ci '{}' -o '{}'", path("suite"), path("out"))), "is outside the suite's folder");
  std::ofstream(path("suite/t.txt")) << "1 2\nhunter2 3\n";
  write_suite("t.txt");
  r = run(fmt::format("ci '{}' -o '{}'", path("suite"), path("out")));
  expect_one_line(r, path("suite/t.txt") + ":2:1: not a token id");
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out")));
}

}  // namespace
}  // namespace tdiff
