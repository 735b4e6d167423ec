// tdiff determinism on the tiny model: emu under naive (atomic reductions, unstable ties) is
// caught run to run and across batches, emu under fixed and refcpu are bit-for-bit
// reproducible, run to run, across thread counts and across batches.
#include <cmath>
#include <cstring>
#include <limits>

#include "checks/determinism.h"
#include "cli_support.h"
#include "casefile/case_file.h"
#include "synth/synth.h"
#include "emu/emu_backend.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

// One tiny model for the whole suite, and two cases from prompts 13-16 of the tiny golden set
// (25 to 33 tokens: 4 HCA and 8 CSA windows, the indexer choosing): all four padded on the
// left to 36, and the first two alone (cheaper sweeps). Under naive their bf16 top-k
// comparisons produce exact ties (cases/README.md).
class Determinism : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff_determinism_{}", ::getpid()));
    fs::create_directories(*dir_);
    write_synth_model(synth_preset("tiny"), 1, (*dir_ / "m").string());
    const auto vocab = synth_preset("tiny").vocab_size;
    const PromptSet all = read_token_file(std::string(TDIFF_SOURCE_DIR) + "/cases/tiny/golden.txt", vocab);
    for (std::size_t count : {4, 2}) {
      CaseInfo info = case_for_model((*dir_ / "m").string());
      PromptSet ps;
      for (std::size_t i = 12; i < 12 + count; ++i) {
        ps.ids.push_back(all.ids[i]);
        ps.lines.push_back(all.lines[i]);
        ps.line_no.push_back(all.line_no[i]);
      }
      info.batch = pad_prompts(ps, 36, true, vocab);
      info.seed = 11;
      info.pad_side = "left";
      info.prompts = ps.lines;
      add_weight_checksums(info);
      create_case(case_path(count), info);
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string case_path(std::size_t prompts = 4) { return (*dir_ / fmt::format("c{}.h5", prompts)).string(); }

  static BackendFactory emu(const std::string& policy) {
    return [p = Policy::preset(policy)](std::uint64_t seed) { return std::make_unique<emu::EmuBackend>(p, seed); };
  }
  static BackendFactory refcpu() {
    return [](std::uint64_t) { return std::make_unique<refcpu::RefCpuBackend>(); };
  }

  static fs::path* dir_;
};
fs::path* Determinism::dir_ = nullptr;

TEST_F(Determinism, NaiveEmuDiffersBetweenRunsFromItsAtomicsAndTies) {
  CaseSession s = open_session(case_path());
  DeterminismOptions o;
  o.runs = 3;
  o.seed = 5;
  const DeterminismResult r = check_determinism(s, emu("naive"), o);
  ASSERT_FALSE(r.deterministic());
  ASSERT_EQ(r.runs.size(), 3u);
  EXPECT_EQ(r.runs[2].seed, 7u);
  // Every origin is an operator whose order the run seed picks: split-K GEMMs, the MoE
  // combine, or a top-k with unstable ties; the first stage that differs is an origin.
  EXPECT_TRUE(r.findings.front().origin);
  std::set<OpKind> kinds;
  for (const auto& f : r.findings) {
    if (!f.origin) continue;
    const Stage& st = *std::find_if(s.stages.begin(), s.stages.end(), [&](const Stage& x) { return x.name == f.stage; });
    kinds.insert(st.kind);
    EXPECT_GT(f.max_abs, 0.0) << f.key();
    EXPECT_FALSE(f.where.empty());
  }
  for (OpKind k : kinds)
    EXPECT_TRUE(k == OpKind::linear || k == OpKind::grouped_linear || k == OpKind::lm_head || k == OpKind::moe_experts ||
                k == OpKind::moe_select || k == OpKind::idx_topk)
        << op_kind_name(k);
  EXPECT_EQ(r.table.verdict, Verdict::fail);
  EXPECT_EQ(r.table.rows.size(), r.table.rows.size());
}

// A host stand-in for a device (what hip does with --on-device, exec/device_comparison.h):
// the wrapped backend keeps its real outputs to itself (its later stages read them there),
// hands back undefined tensors, and its outputs are kept (run 1) or compared (later runs).
class HostSideComparison final : public DeviceComparison {
 public:
  class Wrapped final : public Backend {
   public:
    explicit Wrapped(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
    std::string name() const override { return inner_->name(); }
    bool implements(OpKind k) const override { return inner_->implements(k); }
    const Policy* policy() const override { return inner_->policy(); }
    void release(const std::string& key) override { own_.erase(key); }
    std::vector<Tensor> run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) override {
      std::vector<const Tensor*> real;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto it = own_.find(s.inputs[i].key());
        real.push_back(it != own_.end() ? &it->second : in[i]);
      }
      std::vector<Tensor> out = inner_->run(s, real, ctx);
      for (std::size_t k = 0; k < out.size(); ++k) {
        const std::string key = s.name + "/" + s.outputs[k];
        own_[key] = out[k];
        if (owner_->keep_) owner_->kept_[key] = out[k];
        else owner_->pending_.emplace_back(key, out[k]);
      }
      return std::vector<Tensor>(out.size());
    }
    HostSideComparison* owner_ = nullptr;

   private:
    std::unique_ptr<Backend> inner_;
    std::map<std::string, Tensor> own_;
  };
  // `make`'s backends, each wrapped to report to the comparison it is attached to.
  static BackendFactory wrapping(BackendFactory make) {
    return [make = std::move(make)](std::uint64_t seed) -> std::unique_ptr<Backend> {
      return std::make_unique<Wrapped>(make(seed));
    };
  }
  void attach(Backend& b, bool keep) override {
    dynamic_cast<Wrapped&>(b).owner_ = this;
    keep_ = keep;
  }
  std::vector<Diff> collect(Backend&) override {
    std::vector<Diff> out;
    for (const auto& [key, t] : pending_) {
      const BitDiff d = bit_diff(kept_.at(key), t);
      out.push_back({key, d.numel, d.differing, d.max_abs, d.identical() ? Tensor() : kept_.at(key),
                     d.identical() ? Tensor() : t});
    }
    pending_.clear();
    return out;
  }

 private:
  bool keep_ = false;
  std::map<std::string, Tensor> kept_;
  std::vector<std::pair<std::string, Tensor>> pending_;
};

// The on-device path of check_determinism (only the comparisons come back, run by run) finds
// what the host path finds: the same tensors, runs, origins and differences.
TEST_F(Determinism, ComparedOnTheDeviceFindsWhatTheHostFinds) {
  CaseSession s = open_session(case_path());
  DeterminismOptions o;
  o.runs = 3;
  o.seed = 5;
  const DeterminismResult host = check_determinism(s, emu("naive"), o);
  ASSERT_FALSE(host.deterministic());
  HostSideComparison device;
  o.on_device = &device;
  const DeterminismResult on_device = check_determinism(s, HostSideComparison::wrapping(emu("naive")), o);
  ASSERT_EQ(on_device.findings.size(), host.findings.size());
  for (std::size_t i = 0; i < host.findings.size(); ++i) {
    const Finding &a = host.findings[i], &b = on_device.findings[i];
    EXPECT_EQ(a.key(), b.key());
    EXPECT_EQ(a.where, b.where) << a.key();
    EXPECT_EQ(a.origin, b.origin) << a.key();
    EXPECT_EQ(a.max_abs, b.max_abs) << a.key();
    EXPECT_EQ(a.differing, b.differing) << a.key();
  }
  ASSERT_EQ(on_device.table.rows.size(), host.table.rows.size());
  for (std::size_t i = 0; i < host.table.rows.size(); ++i)
    EXPECT_EQ(on_device.table.rows[i].verdict, host.table.rows[i].verdict) << host.table.rows[i].key();
  // fixed: every tensor identical, judged without a tensor reaching the host.
  HostSideComparison fixed_device;
  o.on_device = &fixed_device;
  const DeterminismResult same = check_determinism(s, HostSideComparison::wrapping(emu("fixed")), o);
  EXPECT_TRUE(same.deterministic());
  EXPECT_EQ(same.table.verdict, Verdict::pass);
  EXPECT_EQ(same.table.rows.size(), host.table.rows.size());
}

TEST_F(Determinism, FixedEmuAndRefcpuAreBitIdenticalAcrossRunsAndThreadCounts) {
  CaseSession s = open_session(case_path(2));
  DeterminismOptions o;
  o.runs = 2;
  o.threads = {1, 2, 3};
  const DeterminismResult fixed = check_determinism(s, emu("fixed"), o);
  EXPECT_TRUE(fixed.deterministic()) << fixed.findings.front().key();
  EXPECT_EQ(fixed.runs.size(), 3u);  // raised to the number of thread counts
  EXPECT_EQ(fixed.table.verdict, Verdict::pass);
  EXPECT_EQ(fixed.table.rows.size(), 181u);
  const DeterminismResult ref = check_determinism(s, refcpu(), o);
  EXPECT_TRUE(ref.deterministic()) << ref.findings.front().key();
}

TEST_F(Determinism, RefcpuIsBatchInvariant) {
  CaseSession s = open_session(case_path(2));
  BatchSweepOptions o;
  o.sizes = {2, 1};
  o.pad_left = {false, true};
  const BatchSweepResult r = check_batch_invariance(s, refcpu(), o);
  EXPECT_TRUE(r.invariant()) << r.findings.front().key() << " " << r.findings.front().worst;
  EXPECT_EQ(r.prompts, 2);
  ASSERT_EQ(r.batches.size(), 2u + 2 * 2);  // alone once, then both pairs padded on either side
  EXPECT_EQ(r.batches.front().size, 1);     // sizes run in increasing order
  EXPECT_EQ(r.batches[3].prompts, (std::vector<int>{1, 0}));
  EXPECT_TRUE(r.batches[5].pad_left);
  EXPECT_EQ(r.sizes.size(), 2u);
  EXPECT_EQ(r.table.rows.size(), 181u);
}

TEST_F(Determinism, NaiveEmuIsNotBatchInvariant) {
  CaseSession s = open_session(case_path(2));
  BatchSweepOptions o;
  o.sizes = {1, 2};
  const BatchSweepResult r = check_batch_invariance(s, emu("naive"), o);
  ASSERT_FALSE(r.invariant());
  EXPECT_EQ(r.sizes[0].tensors_differing, 0);  // alone: the baseline
  EXPECT_GT(r.sizes[1].tensors_differing, 0);
  EXPECT_FALSE(r.sizes[1].first_origin.empty());
}

}  // namespace
}  // namespace tdiff
