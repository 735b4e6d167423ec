// tdiff ci: a small suite runs through the binary with its cache, reports and records, or an
// external implementation's dumps of its cases are judged.
#include <map>
#include <set>
#include <sstream>

#include "app/ci_suite.h"
#include "history_support.h"
#include "mini_suite.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "synth/synth.h"
#include "base/dtype.h"
#include "casefile/h5io.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using Suites = testing::MiniSuite;

TEST_F(Suites, CiRunsEveryCaseCachesAndReports) {
  write_suite();
  const std::string cache = path("cache");
  auto ci = [&](const std::string& args) {
    return run(fmt::format("ci '{}' --cache '{}' {}", dir_.string(), cache, args));
  };
  // fp32 passes the default thresholds; the runs agree bit for bit.
  const auto fp32 = ci(fmt::format("--policy fp32 -o '{}'", path("r1")));
  ASSERT_EQ(fp32.code, 0) << fp32.out << fp32.err;
  EXPECT_NE(fp32.out.find("verdict PASS: 2 PASS, 0 WARN, 0 FAIL of 2 cases"), std::string::npos) << fp32.out;
  EXPECT_NE(fp32.out.find("built into"), std::string::npos);
  EXPECT_NE(fp32.out.find("yes (2 runs)"), std::string::npos);
  const std::string index = testing::slurp(path("r1/index.html"));
  for (const char* c : {"right", "left"}) {
    EXPECT_NE(index.find(fmt::format("href=\"{}/report.html\"", c)), std::string::npos) << c;
    EXPECT_TRUE(fs::exists(path(fmt::format("r1/{}/report.html", c)))) << c;
  }
  EXPECT_NE(index.find("omp_threads"), std::string::npos);
  const std::string junit = testing::slurp(path("r1/junit.xml"));
  EXPECT_NE(junit.find("tests=\"2\" failures=\"0\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<testcase classname=\"tdiff.ci.mini\" name=\"left\""), std::string::npos) << junit;

  // Cached: reused the second time; the run is recorded in the cached case file.
  const auto again = ci(fmt::format("--policy fp32 --cases left --repeat 1 -o '{}'", path("r2")));
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("reused from"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("not checked"), std::string::npos) << again.out;  // --repeat 1
  std::string key;
  for (const auto& e : fs::directory_iterator(cache))
    if (e.is_directory()) key = e.path().string();
  const auto info = run(fmt::format("info '{}/left.h5'", key));
  EXPECT_NE(info.out.find("ci          PASS") , std::string::npos) << info.out;
  const auto recorded = testing::recorded_runs(key + "/left.h5");
  ASSERT_FALSE(recorded.empty());
  EXPECT_EQ(recorded.back().suite, "mini");
  EXPECT_EQ(recorded.back().env.policy, "fp32");
  const auto history = run(fmt::format("history '{}' --kind ci", dir_.string()));
  EXPECT_EQ(history.code, 0) << history.err;
  EXPECT_NE(history.out.find("case mini/left: 2 runs"), std::string::npos) << history.out;

  // naive: atomics and unstable ties make the two runs differ -> FAIL, exit 1, with a
  // determinism report.
  const auto naive = ci(fmt::format("--policy naive --threshold 'cosine_fail=-1,max_abs_fail=inf,mismatch_fail=inf' -o '{}'", path("r3")));
  EXPECT_EQ(naive.code, 1) << naive.out << naive.err;
  EXPECT_NE(naive.out.find("nondeterministic"), std::string::npos) << naive.out;
  EXPECT_NE(testing::slurp(path("r3/junit.xml")).find("<failure"), std::string::npos);

  // A changed definition builds a new cache key and removes the old one.
  write_suite("[[case]]\nname = \"third\"\nprompts = [3]\nseed = 7\n");
  const auto changed = ci(fmt::format("--policy fp32 --cases third --repeat 1 -o '{}'", path("r4")));
  EXPECT_EQ(changed.code, 0) << changed.err;
  EXPECT_NE(changed.out.find("built into"), std::string::npos);
  EXPECT_FALSE(fs::exists(key));
}

// --cases builds the model and the references of the cases it runs, nothing else; a later run
// of the rest builds theirs only (the first case's reference is not made again), and then the
// set is complete.
TEST_F(Suites, CiCasesBuildsOnlyWhatItRuns) {
  write_suite();
  const std::string cache = path("cache");
  auto ci = [&](const std::string& args) {
    return run(fmt::format("ci '{}' --cache '{}' --policy fp32 --repeat 1 {}", dir_.string(), cache, args));
  };
  auto golden_ids = [](const std::string& case_file) {
    std::vector<std::string> ids;
    for (const auto& [id, env] : read_env_records(case_file))
      if (id.rfind("golden", 0) == 0) ids.push_back(id);
    return ids;
  };
  const auto left = ci(fmt::format("--cases 'le*' -o '{}'", path("r1")));
  ASSERT_EQ(left.code, 0) << left.out << left.err;
  EXPECT_NE(left.out.find("built into"), std::string::npos) << left.out;
  EXPECT_NE(left.out.find("(for this run: model, left)"), std::string::npos) << left.out;
  std::string key;
  for (const auto& e : fs::directory_iterator(cache))
    if (e.is_directory()) key = e.path().string();
  ASSERT_FALSE(key.empty());
  EXPECT_TRUE(fs::exists(key + "/left.h5"));
  EXPECT_FALSE(fs::exists(key + "/right.h5"));
  EXPECT_FALSE(fs::exists(key + "/COMPLETE"));
  const auto first = golden_ids(key + "/left.h5");
  ASSERT_EQ(first.size(), 1u);

  const auto all = ci(fmt::format("-o '{}'", path("r2")));
  ASSERT_EQ(all.code, 0) << all.out << all.err;
  EXPECT_NE(all.out.find("(for this run: right)"), std::string::npos) << all.out;
  EXPECT_TRUE(fs::exists(key + "/right.h5"));
  EXPECT_TRUE(fs::exists(key + "/COMPLETE"));
  EXPECT_EQ(golden_ids(key + "/left.h5"), first);
  EXPECT_NE(ci(fmt::format("-o '{}'", path("r3"))).out.find("reused from"), std::string::npos);
}

// Cases on named models ([models.NAME], model = "NAME"): each distinct model is built once, into
// its own folder, only when a case it runs needs it; the folder holds what `tdiff synth` writes
// for that definition; --prepare lists each case's own model folder.
TEST_F(Suites, CiBuildsEachNamedModelOnceForTheCasesThatNameIt) {
  write_suite(
      "[models.trained]\nprofile = \"trained\"\n[models.again]\nseed = 1\n"
      "[[case]]\nname = \"sharp\"\nmodel = \"trained\"\nprompts = [1, 2]\nseed = 7\n"
      "[[case]]\nname = \"twin\"\nmodel = \"again\"\nprompts = [3]\nseed = 8\n");
  const std::string cache = path("cache");
  auto prepare = [&](const std::string& cases) {
    return run(fmt::format("ci '{}' --cache '{}' --prepare --cases '{}'", dir_.string(), cache, cases));
  };
  auto model_of = [](const std::string& listing) {
    std::map<std::string, std::string> out;
    std::stringstream lines(listing);
    for (std::string name, file, model; lines >> name >> file >> model;) out[name] = model;
    return out;
  };
  // The default model's cases first: the trained model is not built for them.
  const auto plain = prepare("left,twin");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.err.find("building model: synth preset tiny seed 1, 2 layers"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find("model-"), std::string::npos) << "[models.again] is [model]: " << plain.err;
  const auto first = model_of(plain.out);
  ASSERT_EQ(first.size(), 2u) << plain.out;
  EXPECT_EQ(first.at("twin"), first.at("left"));
  const std::string key = fs::path(first.at("left")).parent_path().string();
  EXPECT_FALSE(fs::exists(key + "/model-trained"));

  const auto all = prepare("*");
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.err.find("building model-trained: synth preset tiny seed 1, 2 layers, trained profile"),
            std::string::npos)
      << all.err;
  EXPECT_EQ(all.err.find("building model:"), std::string::npos) << "built twice: " << all.err;
  const auto models = model_of(all.out);
  ASSERT_EQ(models.size(), 4u) << all.out;
  EXPECT_EQ(models.at("sharp"), key + "/model-trained");
  EXPECT_EQ(models.at("right"), key + "/model");
  EXPECT_EQ(models.at("twin"), key + "/model");
  EXPECT_TRUE(fs::exists(key + "/model-trained.done"));
  EXPECT_FALSE(fs::exists(key + "/model-again"));

  // The cached model is the one tdiff synth writes for the definition, byte for byte.
  ASSERT_EQ(run(fmt::format("synth --preset tiny --layers 2 --profile trained --seed 1 -o '{}'", path("synth"))).code,
            0);
  EXPECT_EQ(testing::slurp(key + "/model-trained/model.safetensors"), testing::slurp(path("synth/model.safetensors")));
  EXPECT_NE(testing::slurp(key + "/model/model.safetensors"), testing::slurp(path("synth/model.safetensors")));

  // The case on the trained model runs on it, and says so.
  const auto ran = run(fmt::format("ci '{}' --cache '{}' --policy fp32 --repeat 1 --cases 'sharp,right' -o '{}'",
                                   dir_.string(), cache, path("r1")));
  ASSERT_EQ(ran.code, 0) << ran.out << ran.err;
  EXPECT_NE(ran.out.find("reused from"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("sharp            trained "), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("right            -       "), std::string::npos) << ran.out;
  const auto recorded = testing::recorded_runs(key + "/sharp.h5");
  ASSERT_FALSE(recorded.empty());
  EXPECT_NE(recorded.back().env.extra.at("model").find("trained profile"), std::string::npos);
}

// ci records each case into the set's history under --label, times it with --timed, and
// --gate holds the run to a baseline label's records: the same numerics pass, a planted fault
// fails (accuracy only here: this machine's timing noise is not the point).
TEST_F(Suites, CiGatesARunAgainstABaselineLabel) {
  write_suite();
  int n = 0;
  auto ci = [&](const std::string& args) {
    return run(fmt::format("ci '{}' --cache '{}' --repeat 1 --cases right -o '{}' {}", dir_.string(), path("cache"),
                           path(fmt::format("r{}", ++n)), args));
  };
  for (int i = 0; i < 2; ++i) ASSERT_EQ(ci("--policy fp32 --label base --timed 2").code, 0);
  const auto same = ci("--policy fp32 --label same --timed 2 --gate base --gate-speed off");
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("gate same against baseline base"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("gate: PASS"), std::string::npos) << same.out;
  const auto faulty = ci("--policy fp32 --set 'L01.attn.core:qk_accum=fp16' --label faulty --gate base --gate-speed off");
  EXPECT_EQ(faulty.code, 1) << faulty.out << faulty.err;
  EXPECT_NE(faulty.out.find("gate: FAIL"), std::string::npos) << faulty.out;
  const auto h = run(fmt::format("history '{}' --kind ci", dir_.string()));
  EXPECT_NE(h.out.find("case mini/right: 4 runs, 3 builds"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("verified"), std::string::npos);
}

TEST_F(Suites, CiInputErrorsExitTwo) {
  write_suite();
  for (const std::string& args : {fmt::format("ci '{}' --cases nothing", dir_.string()),
                                  fmt::format("ci '{}' --backend hip", dir_.string()),
                                  fmt::format("ci '{}' --threshold 'L9*:cosine_fail=1'", dir_.string()),
                                  fmt::format("ci '{}'", path("none"))}) {
    const auto r = run(args + " --cache " + path("cache"));
    EXPECT_EQ(r.code, 2) << args << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << args << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(path("cache/lock")));  // refused before any build
}

// An engine of someone else's on the golden set: --prepare names each case's file, the engine
// (tdiff's emu through the tap, examples/tap/tap_emu.cpp) writes <case>.h5 into a folder, and
// ci judges every dump as `tdiff run CASE --candidate-dump DUMP` judges it alone.
TEST_F(Suites, CiJudgesAnEnginesDumpsAsRunJudgesEachOne) {
  write_suite();
  const std::string cache = path("cache"), dumps = path("dumps");
  const auto prep = run(fmt::format("ci '{}' --cache '{}' --prepare", dir_.string(), cache));
  ASSERT_EQ(prep.code, 0) << prep.err;
  std::map<std::string, std::string> case_of;
  std::stringstream lines(prep.out);
  for (std::string name, file, model; lines >> name >> file >> model;) {
    case_of[name] = file;
    EXPECT_TRUE(fs::exists(model + "/config.json")) << model;
  }
  ASSERT_EQ(case_of.size(), 2u) << prep.out;
  ASSERT_TRUE(fs::exists(case_of["left"])) << prep.out;
  auto tap_emu = [&](const std::string& name, const std::string& mode) {
    const int status = std::system(fmt::format("'{}' '{}' naive 7 '{}/{}.h5' {} >/dev/null", TAP_EMU_BIN, case_of[name], dumps,
                                               name, mode).c_str());
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  auto ci = [&](const std::string& args) {
    return run(fmt::format("ci '{}' --cache '{}' --candidate-dumps '{}' {}", dir_.string(), cache, dumps, args));
  };
  fs::create_directories(dumps);
  ASSERT_TRUE(tap_emu("right", "run"));
  const auto missing = ci(fmt::format("-o '{}'", path("r0")));
  EXPECT_EQ(missing.code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("no dump for 1 of 2 cases (left.h5)"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(path("r0")));

  ASSERT_TRUE(tap_emu("left", "run"));
  const auto judged = ci(fmt::format("--dump-policy naive -o '{}'", path("r1")));
  ASSERT_NE(judged.code, 2) << judged.err;
  EXPECT_NE(judged.out.find("tap_emu.cpp; mode run"), std::string::npos) << judged.out;
  EXPECT_NE(judged.out.find("not checked"), std::string::npos) << "one dump, no determinism gate: " << judged.out;
  EXPECT_NE(judged.out.find("--candidate-dumps"), std::string::npos) << judged.out;
  int worst = 0;
  for (const auto& [name, file] : case_of) {
    const auto alone = run(fmt::format("run '{}' --candidate-dump '{}/{}.h5' --dump-policy naive --no-record -o '{}'", file,
                                       dumps, name, path("alone-" + name)));
    ASSERT_NE(alone.code, 2) << alone.err;
    worst = std::max(worst, alone.code);
    const std::string a = testing::slurp(path("alone-" + name + "/report.csv"));
    ASSERT_FALSE(a.empty()) << name;
    EXPECT_EQ(testing::slurp(path("r1/" + name + "/report.csv")), a) << name;
    const std::string html = testing::slurp(path("r1/" + name + "/report.html"));
    EXPECT_NE(html.find("--candidate-dump " + dumps + "/" + name + ".h5"), std::string::npos) << "reproduce command: " << name;
  }
  EXPECT_EQ(judged.code, worst) << judged.out;
  EXPECT_NE(testing::slurp(path("r1/junit.xml")).find("name=\"left\""), std::string::npos);

  // Isolated dumps: each case's line names its worst stage, as run ranks them.
  for (const auto& [name, file] : case_of) ASSERT_TRUE(tap_emu(name, "isolated")) << name;
  const auto iso = ci(fmt::format("--cases left --dump-policy naive -o '{}'", path("r-iso")));
  ASSERT_EQ(iso.code, 1) << iso.out << iso.err;
  const auto ranked = run(fmt::format("run '{}' --candidate-dump '{}/left.h5' --dump-policy naive --no-record --no-reports",
                                      case_of["left"], dumps));
  const auto top = ranked.out.find("\n   1  ");
  ASSERT_NE(top, std::string::npos) << ranked.out;
  const std::string first = ranked.out.substr(top + 7, ranked.out.find(' ', top + 7) - top - 7);
  EXPECT_NE(iso.out.find("ranked first by local error: " + first + " ("), std::string::npos) << iso.out << ranked.out;

  // A dump of the right case holding two tensors only: WARN, the reason names what it lacks.
  {
    Tap tap(dumps + "/right.h5");
    for (const char* k : {"embed/e", "lm_head/logits"}) {
      const Tensor t = h5_read(case_of["right"], std::string("/reference/") + k);
      tap.write_raw(k, std::string(dtype_name(t.dtype())), t.raw(), t.shape());
    }
    tap.close();
  }
  const auto part = ci(fmt::format("--cases right -o '{}'", path("r2")));
  EXPECT_EQ(part.code, 0) << part.out << part.err;
  EXPECT_NE(part.out.find("WARN"), std::string::npos) << part.out;
  EXPECT_NE(part.out.find("stages with a reference (first hc.expand; "), std::string::npos) << part.out;

  // A dump that records another case file (tdiff-capture's record theirs): the cases of a set
  // share shapes, so a swapped dump is refused, not judged.
  ASSERT_TRUE(tap_emu("right", "run"));
  {
    H5Writer w(dumps + "/right.h5", dumps + "/right.h5");
    w.set_attr("/", "case", case_of["left"]);
    w.commit();
  }
  const auto swapped = ci(fmt::format("--cases right -o '{}'", path("r-swap")));
  EXPECT_EQ(swapped.code, 2) << swapped.out << swapped.err;
  EXPECT_NE(swapped.err.find("right.h5: written on the case file " + case_of["left"]), std::string::npos) << swapped.err;
  EXPECT_FALSE(fs::exists(path("r-swap")));
  ASSERT_TRUE(tap_emu("right", "run"));

  // A bad dump: exit 2 naming the tensor, before any case is judged or a report is written.
  {
    const Tensor e = h5_read(case_of["left"], "/reference/embed/e");
    Shape s = e.shape();
    s.back() -= 1;
    Tap tap(dumps + "/left.h5");
    tap.write_raw("embed/e", "f64", e.raw(), s);
    tap.close();
  }
  const auto bad = ci(fmt::format("-o '{}'", path("r3")));
  EXPECT_EQ(bad.code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("dataset '/embed/e' is f64"), std::string::npos) << bad.err;
  EXPECT_EQ(testing::count_lines(bad.err), 1u) << bad.err;
  EXPECT_FALSE(fs::exists(path("r3")));
  // A backend and dumps at once, --prepare with anything it would ignore, --dump-policy alone: refused.
  EXPECT_EQ(ci("--backend emu").code, 2);
  EXPECT_EQ(ci("--repeat 3").code, 2);
  EXPECT_EQ(ci("--prepare").code, 2);
  for (const char* ignored : {"-o x", "--policy naive", "--repeat 2", "--run-id x"})
    EXPECT_EQ(run(fmt::format("ci '{}' --cache '{}' --prepare {}", dir_.string(), cache, ignored)).code, 2) << ignored;
  EXPECT_EQ(run(fmt::format("ci '{}' --dump-policy fixed", dir_.string())).code, 2);
}

}  // namespace
}  // namespace tdiff
