// The bisector (bisect/bisect.h) on the tiny model: every knob of the fault catalog injected
// at one stage on top of `fixed` is named exactly, or reported as crossing no threshold; two
// faults give a culprit set of both; isolation, attribution and the watched output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/case_workflows.h"
#include "bisect/bisect.h"
#include "exec/stage_cache.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "backend/executor.h"
#include "numerics/policy.h"
#include "synth/synth.h"
#include "emu/emu_backend.h"
#include "refcpu/refcpu_backend.h"
#include "report/bisect_report.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kRunSeed = 7;

// Writes a case of `rows` prompts x `len` random tokens (as `tdiff case new --random-prompts
// ROWS --len LEN --seed SEED` does) and its float64 reference.
void make_case(const std::string& model, const std::string& path, std::uint64_t seed, std::int64_t rows = 1,
               std::int64_t len = 32) {
  app::CaseRequest request;
  request.model_dir = model;
  request.prompts = random_prompts(rows, len, case_for_model(model).config.vocab_size, seed);
  request.seed = seed;
  app::make_case(request, path);
  CaseSession s = open_session(path);
  app::write_reference(s, {});
}

struct Outcome {
  std::optional<SearchResult> search;
  std::optional<IsolationResult> isolation;
  std::optional<AttributionResult> attribution;
  std::vector<Probe> trace;
  BisectTotals totals;
  std::string outcome;

  std::string dump() const {
    std::string s = outcome + "\n";
    for (const auto& p : trace)
      s += fmt::format("  {} {} {}: error {:.3e} floor {:.3e} ratio {:.4g} {} {}\n", p.step, p.phase, p.split,
                       p.watched.error(), p.watched.companion_error, p.watched.vs_floor(), verdict_name(p.verdict()),
                       p.watched.diff.reason);
    return s;
  }
};

class BisectTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-bisect-{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    model_ = new std::string((*dir_ / "tiny").string());
    write_synth_model(synth_preset("tiny"), 1, *model_);
    // Near-tie routers make the floor jump when the fixed policy flips an expert choice; a
    // case without such flips keeps the floor the smooth rounding noise the gate is built
    // for. The first of a few seeds whose all-fixed run flips no selection (seed 2 today).
    for (std::uint64_t seed : {2, 3, 6, 8, 1, 4, 5, 7}) {
      if (case_) break;
      const std::string path = (*dir_ / fmt::format("c{}.h5", seed)).string();
      make_case(*model_, path, seed);
      CaseSession s = open_session(path, *model_);
      RunContext ctx = s.context();
      refcpu::RefCpuBackend ref;
      emu::EmuBackend floor(Policy::preset("fixed"), kRunSeed);
      Bisector b(s, floor, ref, ctx, {});
      b.set_floor(floor);
      bool flips = false;
      for (const auto& row : b.floor_diff()->rows) flips = flips || (row.routing && row.routing->mismatch_share > 0);
      if (!flips) case_ = new std::string(path);
    }
    ASSERT_TRUE(case_) << "every case flips a routing choice under fixed";
    session_ = new CaseSession(open_session(*case_, *model_));
  }
  static void TearDownTestSuite() {
    delete session_;
    delete case_;
    delete model_;
    fs::remove_all(*dir_);
    delete dir_;
  }

  static Policy fixed_with(const std::vector<std::string>& sets, const std::string& preset = "fixed") {
    Policy p = Policy::preset(preset);
    for (const auto& s : sets) p.add_set(s);
    p.validate(session_->stages);
    return p;
  }

  enum class Mode { search, isolate, attribute, attribute_by_kind };
  // `floor`: the floor policy ("" for none).
  // `rules`: threshold overrides ("PATTERN:key=value"), as --rule gives them.
  static Outcome bisect(const Policy& policy, Mode mode = Mode::search, const std::string& watch = "logits",
                        const std::string& floor = "fixed", const std::vector<std::string>& rules = {},
                        Suffix suffix = Suffix::reference) {
    RunContext ctx = session_->context();
    refcpu::RefCpuBackend ref;
    emu::EmuBackend cand(policy, kRunSeed);
    std::optional<emu::EmuBackend> fl;
    BisectOptions opt;
    opt.watch = watch;
    opt.suffix = suffix;
    for (const auto& r : rules) add_threshold_override(opt.thresholds, r);
    Bisector b(*session_, cand, ref, ctx, opt);
    if (!floor.empty()) b.set_floor(fl.emplace(Policy::preset(floor), kRunSeed));
    Outcome o;
    BisectReport rep;
    rep.watch = b.watch();
    if (mode == Mode::search) o.search = rep.search = b.search();
    if (mode == Mode::isolate) o.isolation = rep.isolation = b.isolate();
    if (mode == Mode::attribute) o.attribution = rep.attribution = b.attribute(Grouping::stage_class);
    if (mode == Mode::attribute_by_kind) o.attribution = rep.attribution = b.attribute(Grouping::op_kind);
    o.trace = b.trace();
    o.totals = b.totals();
    o.outcome = rep.outcome();
    return o;
  }

  // The isolation row of `stage` under `policy`, judged without a floor (thresholds alone).
  static IsolatedStage isolated(const Policy& policy, const std::string& stage) {
    const Outcome o = bisect(policy, Mode::isolate, "logits", "");
    for (const auto& r : o.isolation->ranked)
      if (r.stage == stage) return r;
    throw std::logic_error("no isolation row for " + stage);
  }

  static std::size_t index_of(const std::string& stage) {
    const auto& st = session_->stages;
    for (std::size_t i = 0; i < st.size(); ++i)
      if (st[i].name == stage) return i;
    throw std::logic_error("no stage " + stage);
  }
  static int budget(std::size_t n) { return static_cast<int>(std::ceil(std::log2(static_cast<double>(n)))) + 2; }

  static fs::path* dir_;
  static std::string* model_;
  static std::string* case_;
  static CaseSession* session_;
};
fs::path* BisectTiny::dir_ = nullptr;
std::string* BisectTiny::model_ = nullptr;
std::string* BisectTiny::case_ = nullptr;
CaseSession* BisectTiny::session_ = nullptr;

// The acceptance test of the bisector: for every knob, its known-bad setting at one stage
// picked at random (a generator seeded by the knob's name, so a failure reproduces) among
// the stages the knob touches, everything else `fixed`. Either bisect names exactly that
// stage in at most ceil(log2 N) + 2 mixed runs and the candidate passes with it pinned, or
// the all-candidate run passes (the fault moves the logits by less than the floor gate
// allows) and the outcome says "nothing crosses the threshold". Prints one line per knob.
TEST_F(BisectTiny, EveryCatalogKnobIsNamedExactlyOrCrossesNoThreshold) {
  const auto& stages = session_->stages;
  const int max_runs = budget(stages.size());
  std::vector<std::string> found, below;
  std::printf("knob               injected at               result\n");
  for (const auto& knob : knob_catalog()) {
    std::vector<std::size_t> touched;
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (std::find(knob.kinds.begin(), knob.kinds.end(), stages[i].kind) != knob.kinds.end()) touched.push_back(i);
    ASSERT_FALSE(touched.empty()) << knob.name << " touches no stage of the tiny model";
    std::mt19937_64 rng(std::hash<std::string>{}(knob.name) ^ 0x5eed);
    const std::string stage = stages[touched[rng() % touched.size()]].name;
    const std::string set = fmt::format("{}:{}={}", stage, knob.name, knob.bad);
    // On this fixed base the logits' max-abs sits at the 0.1 default from bf16 rounding alone
    // (0.107 with no fault), so the watched verdict is the floor gate's (rmse <= 3x the
    // all-fixed run's) and cosine's: what a fault adds, not where rounding already is.
    const Outcome o = bisect(fixed_with({set}), Mode::search, "logits", "fixed", {"lm_head:max_abs_fail=inf"});
    const Probe& full = o.trace.front();
    if (!o.search->full_fails) {
      EXPECT_EQ(o.totals.mixed_runs, 1) << set;
      EXPECT_NE(o.outcome.find("nothing crosses the threshold"), std::string::npos) << o.outcome;
      EXPECT_LE(full.watched.vs_floor(), 3.0) << set;
      below.push_back(knob.name);
      std::printf("%-18s %-25s nothing crosses the threshold (logits rmse %.4g x the floor's)\n", knob.name.c_str(),
                  stage.c_str(), full.watched.vs_floor());
      continue;
    }
    ASSERT_EQ(o.search->culprits.size(), 1u) << set << "\n" << o.dump();
    EXPECT_EQ(o.search->culprits[0].stage, stage) << set << "\n" << o.dump();
    EXPECT_TRUE(o.search->passes_after) << set << "\n" << o.dump();
    EXPECT_LE(o.totals.mixed_runs, max_runs) << set << "\n" << o.dump();
    found.push_back(knob.name);
    std::printf("%-18s %-25s found in %d mixed runs (logits rmse %.4g x the floor's)\n", knob.name.c_str(),
                stage.c_str(), o.totals.mixed_runs, full.watched.vs_floor());
  }
  std::printf("found exactly: %s\nbelow every threshold: %s\n", fmt::format("{}", fmt::join(found, " ")).c_str(),
              fmt::format("{}", fmt::join(below, " ")).c_str());
  RecordProperty("found", fmt::format("{}", fmt::join(found, " ")));
  RecordProperty("below_threshold", fmt::format("{}", fmt::join(below, " ")));
}

// The same injection on an fp32 base with an fp32 floor: the floor's own error is float32
// rounding (~1e-7), so every fault that changes any arithmetic shows, and the search must name
// exactly the injected stage in every case where it changes the logits. The knobs that only act
// under a condition these inputs do not meet (sinks keep every row finite for mask_style; no
// exact score ties for topk_ties; no underflowing routing scores; no SwiGLU input past the clip;
// one KV block per query in the first layers for rescale_order; the routing bias is inert in
// hash-routed layers; topk_compare and index_score act only through a selection, which flips
// only on a near-tie finer than bf16; split-K atomics into an fp32 output and 16-bit storage
// move the logits by about the fp32 floor) may cross nothing: the test prints them, and every
// other knob must be found.
TEST_F(BisectTiny, EveryCatalogKnobOnAnFp32BaseIsNamedExactly) {
  const auto& stages = session_->stages;
  const int max_runs = budget(stages.size());
  const std::set<std::string> conditional = {"mask_style", "topk_ties", "routing_norm_eps", "shared_clip", "hc_eps",
                                             "rescale_order", "reduction", "storage", "topk_compare",
                                             "index_score", "routing_bias"};
  std::vector<std::string> found, below;
  for (const auto& knob : knob_catalog()) {
    std::vector<std::size_t> touched;
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (std::find(knob.kinds.begin(), knob.kinds.end(), stages[i].kind) != knob.kinds.end()) touched.push_back(i);
    std::mt19937_64 rng(std::hash<std::string>{}(knob.name) ^ 0xf32);
    const std::string stage = stages[touched[rng() % touched.size()]].name;
    const std::string set = fmt::format("{}:{}={}", stage, knob.name, knob.bad);
    const Outcome o = bisect(fixed_with({set}, "fp32"), Mode::search, "logits", "fp32");
    if (!o.search->full_fails) {
      EXPECT_TRUE(conditional.count(knob.name)) << set << " crosses nothing on an fp32 base\n" << o.dump();
      below.push_back(knob.name + "@" + stage);
      continue;
    }
    ASSERT_EQ(o.search->culprits.size(), 1u) << set << "\n" << o.dump();
    EXPECT_EQ(o.search->culprits[0].stage, stage) << set << "\n" << o.dump();
    EXPECT_TRUE(o.search->passes_after) << set << "\n" << o.dump();
    EXPECT_LE(o.totals.mixed_runs, max_runs) << set << "\n" << o.dump();
    found.push_back(fmt::format("{}@{}({})", knob.name, stage, o.totals.mixed_runs));
    // Issue 18: the named fault also FAILs its own stage on the reference's inputs, judged by
    // the tolerance rule alone (no floor): its error is beyond what fp32 formats explain.
    const IsolatedStage& iso = isolated(fixed_with({set}, "fp32"), stage);
    EXPECT_EQ(iso.worst.verdict, Verdict::fail) << set << " passes its stage in isolation: " << iso.worst.reason;
    std::printf("%-18s %-25s isolated: %s %s\n", knob.name.c_str(), stage.c_str(), verdict_name(iso.worst.verdict),
                iso.worst.reason.c_str());
  }
  std::printf("fp32 base, found exactly (mixed runs): %s\ncrosses nothing: %s\n",
              fmt::format("{}", fmt::join(found, " ")).c_str(), fmt::format("{}", fmt::join(below, " ")).c_str());
}

// fp8 GEMM operands (matmul_input=fp8, 3 mantissa bits) at one projection are far above the
// bf16 floor: the search must find each of these stages, within the run budget.
TEST_F(BisectTiny, Fp8OperandsAtOneGemmAreNamedExactly) {
  for (const std::string stage : {"L00.attn.q_a", "L01.attn.q_a", "L02.moe.experts"}) {
    const Outcome o = bisect(fixed_with({stage + ":matmul_input=fp8"}));
    ASSERT_TRUE(o.search->full_fails) << stage << "\n" << o.dump();
    ASSERT_EQ(o.search->culprits.size(), 1u) << o.dump();
    EXPECT_EQ(o.search->culprits[0].stage, stage) << o.dump();
    EXPECT_EQ(o.search->culprits[0].index, index_of(stage));
    EXPECT_TRUE(o.search->passes_after);
    EXPECT_LE(o.totals.mixed_runs, budget(session_->stages.size())) << o.dump();
    EXPECT_NE(o.outcome.find("first culprit " + stage), std::string::npos) << o.outcome;
    // Every split that keeps the culprit on the reference passes with a ratio of exactly 1:
    // before the culprit the candidate and the floor compute the same bits.
    for (const auto& p : o.trace)
      if (p.prefix <= o.search->culprits[0].index || !p.pinned.empty()) {
        EXPECT_EQ(p.verdict(), Verdict::pass) << p.split;
        EXPECT_EQ(p.watched.vs_floor(), 1.0) << p.split;
      }
  }
}

// The floor after each split (--suffix floor, the default on hip): every split's companion is
// the all-floor run, so the search costs its mixed runs and one floor run, and the same
// stages are named. Splits before the culprit compute the all-floor run's bits: ratio 1.
TEST_F(BisectTiny, WithTheFloorAfterTheSplitTheSameStagesAreNamed) {
  for (const std::string stage : {"L00.attn.q_a", "L01.attn.q_a", "L02.moe.experts"}) {
    const Outcome o = bisect(fixed_with({stage + ":matmul_input=fp8"}), Mode::search, "logits", "fixed", {}, Suffix::floor);
    ASSERT_TRUE(o.search->full_fails) << stage << "\n" << o.dump();
    ASSERT_EQ(o.search->culprits.size(), 1u) << o.dump();
    EXPECT_EQ(o.search->culprits[0].stage, stage) << o.dump();
    EXPECT_TRUE(o.search->passes_after) << o.dump();
    EXPECT_LE(o.totals.mixed_runs, budget(session_->stages.size())) << o.dump();
    EXPECT_EQ(o.totals.floor_runs, 1) << "no companion runs with the floor after the split";
    EXPECT_EQ(o.totals.reused, 0u) << "nothing read from /reference in place of a floor stage";
    for (const auto& p : o.trace)
      if (p.prefix <= o.search->culprits[0].index || !p.pinned.empty()) {
        EXPECT_EQ(p.verdict(), Verdict::pass) << p.split;
        EXPECT_EQ(p.watched.vs_floor(), 1.0) << p.split;
      }
  }
  const Outcome two = bisect(fixed_with({"L01.attn.q_a:matmul_input=fp8", "L02.moe.shared:matmul_input=fp8"}),
                             Mode::search, "logits", "fixed", {}, Suffix::floor);
  ASSERT_EQ(two.search->culprits.size(), 2u) << two.dump();
  EXPECT_EQ(two.search->culprits[0].stage, "L01.attn.q_a");
  EXPECT_EQ(two.search->culprits[1].stage, "L02.moe.shared");
  EXPECT_TRUE(two.search->passes_after) << two.dump();
  const Outcome clean = bisect(fixed_with({}), Mode::search, "logits", "fixed", {}, Suffix::floor);
  EXPECT_FALSE(clean.search->full_fails) << clean.dump();
}

// The catalog on an fp32 base with the floor after each split: every knob the reference
// suffix names (EveryCatalogKnobOnAnFp32BaseIsNamedExactly) is named here too, exactly and
// within the run budget.
TEST_F(BisectTiny, EveryCatalogKnobOnAnFp32BaseIsNamedExactlyWithTheFloorAfterTheSplit) {
  const auto& stages = session_->stages;
  std::vector<std::string> found, below;
  for (const auto& knob : knob_catalog()) {
    std::vector<std::size_t> touched;
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (std::find(knob.kinds.begin(), knob.kinds.end(), stages[i].kind) != knob.kinds.end()) touched.push_back(i);
    std::mt19937_64 rng(std::hash<std::string>{}(knob.name) ^ 0xf32);  // the stages of the reference-suffix test
    const std::string stage = stages[touched[rng() % touched.size()]].name;
    const std::string set = fmt::format("{}:{}={}", stage, knob.name, knob.bad);
    const Policy policy = fixed_with({set}, "fp32");
    const Outcome ref = bisect(policy, Mode::search, "logits", "fp32");
    const Outcome o = bisect(policy, Mode::search, "logits", "fp32", {}, Suffix::floor);
    if (!ref.search->full_fails) {
      below.push_back(knob.name + "@" + stage + (o.search->full_fails ? "(floor suffix: crosses)" : ""));
      continue;
    }
    ASSERT_EQ(o.search->culprits.size(), 1u) << set << "\n" << o.dump();
    EXPECT_EQ(o.search->culprits[0].stage, stage) << set << "\n" << o.dump();
    EXPECT_TRUE(o.search->passes_after) << set << "\n" << o.dump();
    EXPECT_LE(o.totals.mixed_runs, budget(stages.size())) << set << "\n" << o.dump();
    found.push_back(fmt::format("{}@{}({})", knob.name, stage, o.totals.mixed_runs));
  }
  std::printf("fp32 base, floor suffix, found exactly (mixed runs): %s\nthe reference suffix finds nothing: %s\n",
              fmt::format("{}", fmt::join(found, " ")).c_str(), fmt::format("{}", fmt::join(below, " ")).c_str());
}

// Each fault alone fails the logits several times over the floor. (Not every pair does: with
// one strong fault pinned, the other's effect depends on which near-tie routing choices the
// rest of the run makes; L00.attn.q_a with L02.moe.experts, say, leaves the second at 2.7 x.)
TEST_F(BisectTiny, TwoFaultsGiveACulpritSetOfBoth) {
  const Outcome o = bisect(fixed_with({"L01.attn.q_a:matmul_input=fp8", "L02.moe.shared:matmul_input=fp8"}));
  ASSERT_TRUE(o.search->full_fails);
  ASSERT_EQ(o.search->culprits.size(), 2u) << o.dump();
  EXPECT_EQ(o.search->culprits[0].stage, "L01.attn.q_a");
  EXPECT_EQ(o.search->culprits[1].stage, "L02.moe.shared");
  EXPECT_TRUE(o.search->passes_after) << o.dump();
  // The second search starts behind the first culprit: no split is run twice.
  const std::size_t n = session_->stages.size();
  const std::size_t after = n - index_of("L01.attn.q_a") - 1;
  EXPECT_LE(o.totals.mixed_runs, budget(n) + budget(after) - 1) << o.dump();
  EXPECT_NE(o.outcome.find("culprit set {L01.attn.q_a, L02.moe.shared}"), std::string::npos) << o.outcome;
}

TEST_F(BisectTiny, FixedAgainstItsOwnFloorCrossesNothing) {
  const Outcome o = bisect(fixed_with({}));
  EXPECT_FALSE(o.search->full_fails) << o.dump();
  EXPECT_TRUE(o.search->culprits.empty());
  EXPECT_EQ(o.totals.mixed_runs, 1);
  EXPECT_EQ(o.trace.front().watched.vs_floor(), 1.0);
  EXPECT_NE(o.outcome.find("nothing crosses the threshold"), std::string::npos);
}

TEST_F(BisectTiny, WatchedIntermediateStageLimitsTheSearch) {
  // The fault upstream of the watched stage is found within that stage's own budget ...
  const Outcome o = bisect(fixed_with({"L01.attn.q_a:matmul_input=fp8"}), Mode::search, "L01.attn.q_b/out");
  ASSERT_TRUE(o.search->full_fails) << o.dump();
  ASSERT_EQ(o.search->culprits.size(), 1u) << o.dump();
  EXPECT_EQ(o.search->culprits[0].stage, "L01.attn.q_a");
  EXPECT_LE(o.totals.mixed_runs, budget(index_of("L01.attn.q_b") + 1));
  for (const auto& p : o.trace) EXPECT_EQ(p.watched.diff.key(), "L01.attn.q_b/out");
  // ... and a fault downstream of it cannot matter.
  const Outcome later = bisect(fixed_with({"L02.moe.experts:matmul_input=fp8"}), Mode::search, "L01.attn.q_b");
  EXPECT_FALSE(later.search->full_fails) << later.dump();
}

TEST(BisectWatch, UnknownWatchIsAnInputError) {
  const auto stages = build_stages(synth_preset("tiny"));
  EXPECT_THROW(resolve_watch(stages, "L99.attn.core"), InputError);
  EXPECT_THROW(resolve_watch(stages, "lm_head/nope"), InputError);
  const Watch w = resolve_watch(stages, "logits");
  EXPECT_EQ(w.key(), "lm_head/logits");
  EXPECT_EQ(w.index, stages.size() - 1);
  EXPECT_EQ(resolve_watch(stages, "L00.hc_attn.sinkhorn").key(), "L00.hc_attn.sinkhorn");
  EXPECT_EQ(resolve_watch(stages, "L00.hc_attn.sinkhorn").tensor, "");
}

TEST_F(BisectTiny, WithoutAFloorTheThresholdsAloneJudge) {
  // fp32 everywhere passes the default thresholds; fp8 at one projection fails them.
  Policy fp32 = Policy::preset("fp32");
  const Outcome ok = bisect(fp32, Mode::search, "logits", "");
  EXPECT_FALSE(ok.search->full_fails) << ok.dump();
  EXPECT_EQ(ok.totals.floor_runs, 0);
  fp32.add_set("L00.attn.q_a:matmul_input=fp8");
  const Outcome bad = bisect(fp32, Mode::search, "logits", "");
  ASSERT_EQ(bad.search->culprits.size(), 1u) << bad.dump();
  EXPECT_EQ(bad.search->culprits[0].stage, "L00.attn.q_a");
}

// Issue 5's acceptance read per operator: every stage of the tiny model under `fixed`, run on
// the reference's own inputs, passes the default thresholds (cosine >= 0.99, max_abs < 0.1,
// selections within 1%) with no noise floor. End to end the bf16 rounding compounds through
// near-tied routing and indexer choices and later stages fail; bench/README.md gives those
// numbers.
TEST_F(BisectTiny, FixedPassesTheDefaultThresholdsOnEveryStageInIsolation) {
  const Outcome o = bisect(Policy::preset("fixed"), Mode::isolate, "logits", "");
  ASSERT_EQ(o.isolation->ranked.size(), session_->stages.size());
  double worst = 0;
  for (const auto& r : o.isolation->ranked) {
    EXPECT_NE(r.worst.verdict, Verdict::fail) << r.stage << ": " << r.worst.reason;
    if (r.worst.kind != TensorKind::exact && r.worst.kind != TensorKind::routing) worst = std::max(worst, r.worst.metrics.rel_l2);
  }
  EXPECT_GT(worst, 1e-4);  // bf16 stores: a real error, not a copy of the reference
  std::printf("fixed, isolated: worst stage rel_l2 %.3g\n", worst);
}

// The control of the fp32-base isolation check above: fp32 alone, on the reference's inputs,
// stays within what its formats explain at every stage (no floor), so a FAIL there is the fault's.
TEST_F(BisectTiny, Fp32StaysWithinItsExpectedErrorOnEveryStageInIsolation) {
  const Outcome o = bisect(Policy::preset("fp32"), Mode::isolate, "logits", "");
  double worst = 0;
  for (const auto& r : o.isolation->ranked) {
    EXPECT_EQ(r.worst.verdict, Verdict::pass) << r.stage << ": " << r.worst.reason;
    if (!std::isnan(r.worst.tolerance_ratio)) worst = std::max(worst, r.worst.tolerance_ratio);
  }
  EXPECT_GT(worst, 0.0);  // every float stage was judged against an expected error
  std::printf("fp32, isolated: highest error / expected %.3g\n", worst);
}

TEST_F(BisectTiny, IsolationRanksTheFaultyStageFirst) {
  const Outcome o = bisect(fixed_with({"L01.attn.q_a:matmul_input=fp8"}), Mode::isolate);
  const auto& ranked = o.isolation->ranked;
  ASSERT_EQ(ranked.size(), session_->stages.size());
  EXPECT_EQ(ranked[0].stage, "L01.attn.q_a");
  EXPECT_EQ(ranked[0].worst.verdict, Verdict::fail) << ranked[0].worst.reason;
  // Every other stage computes what the floor computes: ratio 1, PASS.
  for (std::size_t i = 1; i < ranked.size(); ++i) {
    EXPECT_EQ(ranked[i].score, 1.0) << ranked[i].stage;
    EXPECT_EQ(ranked[i].worst.verdict, Verdict::pass) << ranked[i].stage << ": " << ranked[i].worst.reason;
  }
  EXPECT_EQ(o.totals.mixed_runs, 0);
  EXPECT_EQ(o.totals.isolated_runs, static_cast<int>(session_->stages.size()));
}

TEST_F(BisectTiny, AttributionPutsASingleFaultInItsOwnKind) {
  const Outcome o = bisect(fixed_with({"L02.moe.experts:matmul_input=fp8"}), Mode::attribute_by_kind);
  const AttributionResult& a = *o.attribution;
  ASSERT_FALSE(a.rows.empty());
  EXPECT_EQ(a.rows[0].group, "moe_experts");
  EXPECT_GT(a.rows[0].share, 0.5);
  std::size_t stages = 0;
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    stages += a.rows[i].stages;
    if (i) {
      EXPECT_LE(a.rows[i].share, a.rows[i - 1].share);
    }
  }
  EXPECT_EQ(stages, session_->stages.size()) << "every stage in exactly one group";
}

TEST_F(BisectTiny, AttributionUnderNaiveCoversEveryClass) {
  const Outcome o = bisect(Policy::preset("naive"), Mode::attribute);
  const AttributionResult& a = *o.attribution;
  EXPECT_GT(a.all_error, 0);
  EXPECT_GT(a.rows.front().share, 0);
  double sum = 0;
  std::printf("attribution under naive (logits rmse %.4g):\n", a.all_error);
  for (const auto& c : a.rows) {
    sum += c.share;
    std::printf("  %-22s %3zu stages  rmse %.3e  share %5.1f%%  alone/all %.3g  vs floor %.3g  %s\n", c.group.c_str(),
                c.stages, c.watched.error(), 100 * c.share, c.vs_all, c.watched.vs_floor(),
                verdict_name(c.watched.diff.verdict));
  }
  std::printf("  classes in quadrature: %.3g x the all-candidate error\n", a.quadrature);
  EXPECT_NEAR(sum, 1.0, 1e-9);
  // Classes whose stages are computed alike under naive and the reference (integer logic
  // such as masks) leave the logits untouched.
  for (const auto& c : a.rows)
    if (c.group == "mask.window") {
      EXPECT_EQ(c.watched.error(), 0.0);
    }
}

// The stage cache gives back the same outputs as a recomputation.
TEST_F(BisectTiny, StageCacheReplaysARunBitForBit) {
  RunContext ctx = session_->context();
  refcpu::RefCpuBackend ref;
  emu::EmuBackend cand(Policy::preset("fixed"), kRunSeed);
  StageCache cache(session_->stages);
  std::vector<bool> split(session_->stages.size(), false);
  for (std::size_t i = 0; i < split.size() / 2; ++i) split[i] = true;
  MixedRunOptions mo;
  mo.cache = &cache;
  const MixedRunResult first = run_mixed(*session_, cand, ref, split, ctx, mo);
  const MixedRunResult again = run_mixed(*session_, cand, ref, split, ctx, mo);
  EXPECT_EQ(first.cached, 0u);
  EXPECT_EQ(again.cached + again.reused, session_->stages.size());
  ASSERT_EQ(first.diff.rows.size(), again.diff.rows.size());
  for (std::size_t i = 0; i < first.diff.rows.size(); ++i) {
    EXPECT_EQ(first.diff.rows[i].metrics.rmse, again.diff.rows[i].metrics.rmse) << first.diff.rows[i].key();
    EXPECT_EQ(first.diff.rows[i].metrics.n_diff, again.diff.rows[i].metrics.n_diff) << first.diff.rows[i].key();
  }
  // Another split shares the cached prefix only where the upstream assignment is the same.
  split.back() = true;
  const MixedRunResult other = run_mixed(*session_, cand, ref, split, ctx, mo);
  EXPECT_EQ(other.cached + other.reused, session_->stages.size() - 1);
}


// Issue 21 item 3: the same injection on the trained-like profile (`tdiff synth --profile
// trained`), from the default floor `fixed`, as `tdiff bisect CASE --policy fixed --set
// 'STAGE:knob=bad'` runs it (default thresholds, the floor gate judging the logits).
class BisectTrained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-bisect-trained-{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string model = (*dir_ / "tiny-trained").string();
    SynthOptions so;
    so.profile = SynthProfile::trained;
    write_synth_model(synth_preset("tiny"), 1, model, {}, so);
    const std::string path = (*dir_ / "c.h5").string();
    make_case(model, path, 1, 2, 64);
    session_ = new CaseSession(open_session(path, model));
  }
  static void TearDownTestSuite() {
    delete session_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  struct Result {
    Outcome o;
    std::optional<IsolationResult> leads;
  };
  // `replay`: selection replay in the mixed runs (BisectOptions::replay_selections).
  static Result bisect(const std::vector<std::string>& sets, bool replay = false, const std::string& watch = "logits") {
    Policy policy = Policy::preset("fixed");
    for (const auto& s : sets) policy.add_set(s);
    policy.validate(session_->stages);
    RunContext ctx = session_->context();
    refcpu::RefCpuBackend ref;
    emu::EmuBackend cand(policy, kRunSeed), fl(Policy::preset("fixed"), kRunSeed);
    BisectOptions opt;
    opt.replay_selections = replay;
    opt.watch = watch;
    Bisector b(*session_, cand, ref, ctx, opt);
    b.set_floor(fl);
    Result r;
    BisectReport rep;
    rep.watch = b.watch();
    r.o.search = rep.search = b.search();
    if (!r.o.search->full_fails && watch == "logits") r.leads = rep.leads = b.isolate();
    r.o.trace = b.trace();
    r.o.totals = b.totals();
    r.o.outcome = rep.outcome();
    return r;
  }
  static int budget(std::size_t n) { return static_cast<int>(std::ceil(std::log2(static_cast<double>(n)))) + 2; }
  static fs::path* dir_;
  static CaseSession* session_;
};
fs::path* BisectTrained::dir_ = nullptr;
CaseSession* BisectTrained::session_ = nullptr;

// Issue 21 item 3, "bisect from the default": every knob's known-bad setting at one stage
// drawn with a fixed seed among the stages it touches, on top of `fixed`, judged against the
// `fixed` floor with the default thresholds, as `tdiff bisect CASE --set 'STAGE:knob=bad'`
// does. A fault whose logits cross the floor gate must be named exactly within ceil(log2 N)+2
// mixed runs. On this profile none does: the floor's own logits error is large (rmse 0.11,
// rel_l2 0.057: bf16 stores of activations near 10^3, and near-tied routing flips), and no
// single catalog fault moves the logits past 3x it (the largest, sinkhorn=fp16, 1.5x). Such a
// run is inconclusive and must still point at the fault: every fault whose local error on the
// reference's inputs exceeds floor_k x the floor candidate's is among the five leads (first,
// today) and FAILs there. The suggested next command (watching the first lead's output end to
// end) is run and printed, not asserted: it names the stage only where the fault also stands
// out of the floor's error accumulated upstream, and today it never does (sinkhorn=fp16 at
// L00.hc_attn.mix is 3.7e3x the floor on the reference's inputs, 1.03x end to end at its own
// output: the bf16 embedding's rounding already dominates there). Faults within floor_k of the
// floor even locally (fp16 storage or GEMM operands are finer than fixed's bf16; conditional
// knobs whose condition these inputs do not meet) cannot be told from the floor by any run:
// the test prints them. Prints the table of bench/README.md.
TEST_F(BisectTrained, EveryCatalogKnobFromFixedIsNamedOrLeadsToItsStage) {
  const auto& stages = session_->stages;
  const double floor_k = Thresholds().floor_k;
  std::printf("| knob | stage | crosses the floor gate (logits rmse / floor's) | named | mixed runs | local / floor (lead rank) | next command names |\n");
  int crossed = 0, led = 0;
  for (const auto& knob : knob_catalog()) {
    std::vector<std::size_t> touched;
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (std::find(knob.kinds.begin(), knob.kinds.end(), stages[i].kind) != knob.kinds.end()) touched.push_back(i);
    ASSERT_FALSE(touched.empty()) << knob.name;
    std::mt19937_64 rng(std::hash<std::string>{}(knob.name) ^ 0x7a1);
    const std::size_t at = touched[rng() % touched.size()];
    const std::string stage = stages[at].name;
    const std::string set = fmt::format("{}:{}={}", stage, knob.name, knob.bad);
    const Result r = bisect({set});
    const Probe& full = r.o.trace.front();
    if (r.o.search->full_fails) {
      ++crossed;
      ASSERT_EQ(r.o.search->culprits.size(), 1u) << set << "\n" << r.o.dump();
      EXPECT_EQ(r.o.search->culprits[0].stage, stage) << set << "\n" << r.o.dump();
      EXPECT_TRUE(r.o.search->passes_after) << set << "\n" << r.o.dump();
      EXPECT_LE(r.o.totals.mixed_runs, budget(stages.size())) << set << "\n" << r.o.dump();
      std::printf("| %s | %s | yes, %.3gx | %s | %d | | |\n", knob.name.c_str(), stage.c_str(), full.watched.vs_floor(),
                  r.o.search->culprits[0].stage.c_str(), r.o.totals.mixed_runs);
      continue;
    }
    EXPECT_EQ(r.o.totals.mixed_runs, 1) << set;
    EXPECT_NE(r.o.outcome.find("inconclusive: nothing crosses the threshold"), std::string::npos) << r.o.outcome;
    ASSERT_TRUE(r.leads);
    const auto& ranked = r.leads->ranked;
    const auto it = std::find_if(ranked.begin(), ranked.end(), [&](const IsolatedStage& e) { return e.stage == stage; });
    ASSERT_NE(it, ranked.end()) << set;
    const std::size_t rank = static_cast<std::size_t>(it - ranked.begin()) + 1;
    std::string next = "-";
    if (it->score > floor_k) {
      ++led;
      EXPECT_LE(rank, 5u) << set << ": local " << it->score << "x the floor, not among the leads";
      EXPECT_EQ(it->worst.verdict, Verdict::fail) << set << ": " << it->worst.reason;
      // The next command: the same bisection watching the first lead's output (see above).
      const Result n = bisect({set}, false, ranked.front().worst.key());
      next = n.o.search->full_fails && !n.o.search->culprits.empty()
                 ? fmt::format("{} in {} mixed runs", n.o.search->culprits[0].stage, n.o.totals.mixed_runs)
                 : fmt::format("inconclusive ({:.3g}x)", n.o.trace.front().watched.vs_floor());
      if (n.o.search->full_fails) {
        EXPECT_EQ(n.o.search->culprits[0].stage, stage) << set << "\n" << n.o.dump();
        EXPECT_LE(n.o.totals.mixed_runs, budget(stages.size())) << set << "\n" << n.o.dump();
      }
    }
    std::printf("| %s | %s | no, %.3gx | - | 1 | %.3gx (%zu) | %s |\n", knob.name.c_str(), stage.c_str(),
                full.watched.vs_floor(), it->score, rank, next.c_str());
  }
  std::printf("crossed the floor gate: %d; inconclusive with the fault among the leads and named next: %d\n", crossed, led);
  EXPECT_GT(led, 0);
}


// The faults that do cross on this profile, every one named: norm_stats=fp16 (fp16 sums of
// squares overflow past a channel of 256, and the trained profile's massive activations reach
// ~10^3). Of its 35 stages, the sweep below finds these four crossing the floor gate (4.8-8.1x
// the floor's logits rmse; the other 31 take 0.3-8 s each, so they stay in the sweep): bisect
// names exactly each stage within ceil(log2 N)+2 mixed runs and the candidate passes with it
// pinned.
TEST_F(BisectTrained, NormStatsOverflowIsNamedExactlyWhereItCrosses) {
  const auto& stages = session_->stages;
  for (const std::string stage : {"L00.attn_norm", "L01.attn_norm", "L02.attn_norm", "final.norm"}) {
    const std::string set = stage + ":norm_stats=fp16";
    const Result r = bisect({set});
    ASSERT_TRUE(r.o.search->full_fails) << set << "\n" << r.o.dump();
    ASSERT_EQ(r.o.search->culprits.size(), 1u) << set << "\n" << r.o.dump();
    EXPECT_EQ(r.o.search->culprits[0].stage, stage) << set << "\n" << r.o.dump();
    EXPECT_TRUE(r.o.search->passes_after) << set << "\n" << r.o.dump();
    EXPECT_LE(r.o.totals.mixed_runs, budget(stages.size())) << set << "\n" << r.o.dump();
    EXPECT_NE(r.o.outcome.find("first culprit " + stage), std::string::npos) << r.o.outcome;
    std::printf("%s: named in %d mixed runs (logits rmse %.3gx the floor's)\n", set.c_str(), r.o.totals.mixed_runs,
                r.o.trace.front().watched.vs_floor());
  }
}

// Selection replay in bisect's mixed runs (BisectOptions::replay_selections, with the stage
// cache): the all-fixed floor no longer carries its near-tie flips, so its logits error drops,
// and a replayed floor against itself still crosses nothing.
TEST_F(BisectTrained, ReplayedSelectionsLowerTheFloor) {
  const Result free_run = bisect({}, false), replayed = bisect({}, true);
  const double free_floor = free_run.o.trace.front().watched.floor_error;
  const double replayed_floor = replayed.o.trace.front().watched.floor_error;
  EXPECT_LT(replayed_floor, 0.7 * free_floor) << free_floor << " " << replayed_floor;
  EXPECT_FALSE(replayed.o.search->full_fails);
  EXPECT_EQ(replayed.o.trace.front().watched.vs_floor(), 1.0);
  std::printf("fixed floor, logits rmse: selections free %.3g, replayed %.3g\n", free_floor, replayed_floor);
}

// Every (knob, stage) pair rather than one drawn stage a knob: a few minutes on 2 cores, for
// bench/README.md (--gtest_also_run_disabled_tests; REPLAY=1 replays the selections).
TEST_F(BisectTrained, DISABLED_Sweep) {
  const auto& stages = session_->stages;
  const int max_runs = static_cast<int>(std::ceil(std::log2(static_cast<double>(stages.size())))) + 2;
  const bool replay = std::getenv("REPLAY") != nullptr;
  for (const auto& knob : knob_catalog()) {
    int n = 0, cross = 0, named = 0, worst = 0;
    std::string bad;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      if (std::find(knob.kinds.begin(), knob.kinds.end(), stages[i].kind) == knob.kinds.end()) continue;
      ++n;
      const std::string set = fmt::format("{}:{}={}", stages[i].name, knob.name, knob.bad);
      const Result r = bisect({set}, replay);
      if (!r.o.search->full_fails) continue;
      ++cross;
      worst = std::max(worst, r.o.totals.mixed_runs);
      const bool ok = r.o.search->culprits.size() == 1 && r.o.search->culprits[0].stage == stages[i].name &&
                      r.o.totals.mixed_runs <= max_runs && r.o.search->passes_after;
      if (ok) ++named;
      else {
        std::string c;
        for (const auto& x : r.o.search->culprits) c += x.stage + ",";
        bad += fmt::format(" {}->{}({}, {:.3g}x)", stages[i].name, c, r.o.totals.mixed_runs, r.o.trace.front().watched.vs_floor());
      }
    }
    std::printf("%-17s stages %3d crosses %3d named %3d max runs %2d;%s\n", knob.name.c_str(), n, cross, named, worst, bad.c_str());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace tdiff
