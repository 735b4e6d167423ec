// One test per knob of the fault catalog: on the tiny synthetic model, flipping that knob alone
// from the fixed preset to its bad setting raises the error (against the float64 reference) of
// the stages it touches, each stage run in isolation on the reference's own inputs. Where a
// knob only matters under a condition (exact ties, several split-K partials, values outside
// fp16's range, never-written KV slots, underflowing scores, active clipping) the test builds
// that condition and says so; where the bad setting is harmless otherwise the test pins that
// down too, so a change in the emu model shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "checks/audit.h"
#include "bisect/isolate.h"
#include "emu/emu_backend.h"
#include "emu_case.h"
#include "field_count.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::build_golden_case;
using testing::random_ids;

class EmuKnobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const ModelConfig tiny = synth_preset("tiny");
    // Row 0: 128 tokens: two 64-key blocks, 32 CSA and 16 HCA entries, the indexer choosing
    // 4 of up to 32 entries. Row 1: 64 tokens padded on the right to 128, so its keys 64..127
    // are one whole block of padding.
    const auto main = testing::cached_golden_case("knobs-main", [&](const fs::path& d) {
      build_golden_case(d, tiny, 1, {random_ids(128, tiny.vocab_size, 11), random_ids(64, tiny.vocab_size, 12)}, 128);
    });
    main_ = new CaseSession(open_session(main.path, main.model));
  }
  static void TearDownTestSuite() {
    delete main_;
    delete clip_;
  }
  // The spec's clipping-active variant (swiglu_limit 0.4): SwiGLU pre-activations cross the limit.
  static CaseSession* clip_case() {
    if (clip_) return clip_;
    ModelConfig clip = synth_preset("tiny");
    clip.swiglu_limit = 0.4;
    const auto c = testing::cached_golden_case("knobs-clip", [&](const fs::path& d) {
      build_golden_case(d, clip, 1, {random_ids(64, clip.vocab_size, 13)}, 64);
    });
    return clip_ = new CaseSession(open_session(c.path, c.model));
  }

  // The touched stages under fixed + `set` ("knob=value"), each in isolation.
  static LocalError measure(const std::string& set, const std::vector<OpKind>& kinds, const InputHook& hook = {},
                            std::uint64_t seed = 1, CaseSession* s = nullptr) {
    CaseSession& session = s ? *s : *main_;
    Policy p = Policy::preset("fixed");
    p.add_set(set);
    emu::EmuBackend cand(p, seed);
    RunContext ctx = session.context();
    return local_error(session, cand, kinds, ctx, hook);
  }
  static LocalError bad(const std::string& knob, const InputHook& hook = {}, CaseSession* s = nullptr) {
    const KnobInfo& k = knob_info(knob);
    return measure(k.name + "=" + k.bad, k.kinds, hook, 1, s);
  }
  static LocalError good(const std::string& knob, const InputHook& hook = {}, CaseSession* s = nullptr) {
    const KnobInfo& k = knob_info(knob);
    return measure(k.name + "=" + k.good, k.kinds, hook, 1, s);
  }

  // The outputs of every stage of `kind` under fixed + `set`, in isolation, with run seed `seed`.
  static std::vector<Tensor> outputs(const std::string& set, const std::vector<OpKind>& kinds, std::uint64_t seed) {
    Policy p = Policy::preset("fixed");
    p.add_set(set);
    emu::EmuBackend cand(p, seed);
    RunContext ctx = main_->context();
    std::vector<Tensor> out;
    for (const Stage& s : main_->stages)
      if (std::find(kinds.begin(), kinds.end(), s.kind) != kinds.end())
        for (auto& t : run_isolated(*main_, s, cand, ctx)) out.push_back(std::move(t));
    return out;
  }
  static int differing(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    int n = 0;
    for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0;
    return n;
  }

  static CaseSession* main_;
  static CaseSession* clip_;
};
CaseSession* EmuKnobs::main_ = nullptr;
CaseSession* EmuKnobs::clip_ = nullptr;

// Multiplies input `index` of the stages named `stage` by `scale` (a power of two), and the
// reference outputs too: for a linear stage that is exact in float64.
InputHook scaled(const std::string& stage, std::size_t index, double scale) {
  return [=](const Stage& s, std::vector<Tensor>& in, std::vector<Tensor>& ref) {
    if (s.name != stage) return false;
    for (double& v : in[index].span<double>()) v *= scale;
    for (auto& r : ref)
      for (double& v : r.span<double>()) v *= scale;
    return true;
  };
}

std::string factor(const LocalError& b, const LocalError& g) { return fmt::format("bad {:.3e} good {:.3e}", b.rel_l2, g.rel_l2); }

// ---- Knobs whose bad setting raises the touched stages' error on the case as it is ------------

class RaisesError : public EmuKnobs, public ::testing::WithParamInterface<const char*> {};

TEST_P(RaisesError, OnTheReferenceInputs) {
  const std::string knob = GetParam();
  const LocalError b = bad(knob), g = good(knob);
  ASSERT_GT(b.float_tensors, 0) << knob << " touches no floating-point stage of the tiny model";
  EXPECT_EQ(g.nonfinite, 0) << knob;
  EXPECT_GT(b.rel_l2, g.rel_l2) << knob << ": " << factor(b, g);
}
// Measured factors (geometric means over the touched tensors; `tdiff audit` prints them): stream
// ~9x, matmul_accum 1.05x, qk_accum 1.02x, pv_accum 1.01x, softmax_stats 1.01x,
// rescale_order 1.07x, router 2.5x, reduction 1.25x, logits 1.14x, norm_stats 5x, rope_angle
// 50x, sinkhorn 2900x, hc_eps 8x, pool_softmax 1.01x, index_score 1.8x, routing_bias 2e4x.
// The small ones are small because the bf16 rounding of every stage's inputs and outputs,
// the same on both sides, dominates at the tiny model's widths (d = 32, K <= 64).
INSTANTIATE_TEST_SUITE_P(Knobs, RaisesError,
                         ::testing::Values("stream", "matmul_accum", "qk_accum", "pv_accum", "softmax_stats",
                                           "rescale_order", "router", "reduction", "logits", "norm_stats", "rope_angle",
                                           "sinkhorn", "hc_eps", "pool_softmax", "index_score", "routing_bias"),
                         [](const auto& info) { return std::string(info.param); });

TEST_F(EmuKnobs, RescaleOrderNeedsMoreThanOneKvBlock) {
  // per_block renormalises after every KV block: the sliding layer's queries 64..127 of row 0
  // see keys in two blocks; the error rises in every attention stage.
  const LocalError b = bad("rescale_order"), g = good("rescale_order");
  ASSERT_EQ(b.rows.size(), 4u);
  for (std::size_t i = 0; i < b.rows.size(); ++i) EXPECT_GT(b.rows[i].metrics.rel_l2, g.rows[i].metrics.rel_l2) << b.rows[i].key();
}

TEST_F(EmuKnobs, RopeAngleLosesThePhase) {
  // fp16 angles: at positions 64..127 the angle of the first frequency (1 rad per position)
  // is exact, the others keep 10 bits: the tables are off by ~1e-3 instead of ~1e-7.
  const LocalError b = bad("rope_angle"), g = good("rope_angle");
  for (std::size_t i = 0; i < b.rows.size(); ++i)
    if (b.rows[i].stage.starts_with("rope.")) EXPECT_GT(b.rows[i].metrics.rel_l2, 1000 * g.rows[i].metrics.rel_l2);
}

// ---- Top-k knobs: selections against the reference's --------------------------------------------

TEST_F(EmuKnobs, TopkCompareFlipsNearTies) {
  const LocalError b = bad("topk_compare"), g = good("topk_compare");
  ASSERT_GT(b.selection_tensors, 0);
  EXPECT_EQ(g.selection_tokens, 0);  // fp32 comparison of the reference's own scores
  EXPECT_GT(b.selection_tokens, 0);
}

TEST_F(EmuKnobs, TopkTiesNeedExactTiesAndChangeWithTheRunSeed) {
  // The tiny indexer has exact ties: a score is sum_h w_h relu(q_h.k), and with 4 heads all
  // four dot products are negative often enough that several entries score exactly 0.
  std::int64_t zero_ties = 0;
  for (const Stage& s : main_->stages)
    if (s.kind == OpKind::idx_score) {
      const Tensor sc = read_reference(main_->path, s.name, "score");
      for (double v : sc.span<double>()) zero_ties += v == 0.0;
    }
  ASSERT_GT(zero_ties, 0);
  const LocalError b = bad("topk_ties"), g = good("topk_ties");
  EXPECT_EQ(g.selection_tokens, 0);  // lowest index first, as the reference
  EXPECT_GT(b.selection_tokens, 0);
  // Run to run: unstable ties differ between two run seeds, index ties never.
  const auto& k = knob_info("topk_ties");
  EXPECT_GT(differing(outputs("topk_ties=unstable", k.kinds, 1), outputs("topk_ties=unstable", k.kinds, 2)), 0);
  EXPECT_EQ(differing(outputs("topk_ties=index", k.kinds, 1), outputs("topk_ties=index", k.kinds, 2)), 0);
}

// ---- Reduction: order-dependent bits ----------------------------------------------------------

TEST_F(EmuKnobs, AtomicReductionDiffersBetweenRunSeeds) {
  // Split-K: 4 partials per output, each rounded to the output format and atomically added in
  // a seed-dependent order. (Two contributions could never differ: a + b = b + a.)
  const auto& k = knob_info("reduction");
  const auto a1 = outputs("reduction=atomic", k.kinds, 1), a2 = outputs("reduction=atomic", k.kinds, 2);
  EXPECT_GT(differing(a1, a2), static_cast<int>(a1.size()) / 2);
  EXPECT_EQ(differing(outputs("reduction=fixed", k.kinds, 1), outputs("reduction=fixed", k.kinds, 2)), 0);
}

// ---- Range knobs: fp16 is the more precise format until values leave its range -------------------

TEST_F(EmuKnobs, Fp16StorageIsMorePreciseInRangeAndOverflowsOutOfIt) {
  // fp16 keeps 10 mantissa bits against bf16's 7: on the tiny model's O(1) activations its
  // error is lower (the bad setting is a range fault, not a precision fault).
  const LocalError b = bad("storage"), g = good("storage");
  EXPECT_LT(b.rel_l2, g.rel_l2) << factor(b, g);
  // A stage that stores its output in the storage format and commutes with scaling (RoPE's
  // rotation) on inputs 2^16 times larger, as massive activations of ~1e5 (DeepSeek-V2's
  // hidden states overflow fp16): bf16's relative error does not move, fp16 overflows to inf.
  // (The collapses hc_pre/hc_head are in the stream format, the `stream` knob's.)
  const std::vector<OpKind> rope = {OpKind::rope};
  const LocalError g1 = measure("storage=bf16", rope), b1 = measure("storage=fp16", rope);
  const auto hook = scaled("L00.attn.q_rope", 0, 65536.0);
  const LocalError gs = measure("storage=bf16", rope, hook), bs = measure("storage=fp16", rope, hook);
  EXPECT_EQ(gs.nonfinite, 0);
  EXPECT_NEAR(gs.rows[0].metrics.rel_l2, g1.rows[0].metrics.rel_l2, 1e-12);
  EXPECT_EQ(b1.nonfinite, 0);
  EXPECT_GT(bs.nonfinite, 0);
}

TEST_F(EmuKnobs, Fp16MatmulInputsAreFlushedOrOverflowOutsideTheirRange) {
  const LocalError b = bad("matmul_input"), g = good("matmul_input");
  EXPECT_LT(b.rel_l2, g.rel_l2) << factor(b, g);  // in range: 10 mantissa bits beat 7
  const std::vector<OpKind> lin = {OpKind::linear};
  const LocalError g1 = measure("matmul_input=bf16", lin);
  auto row = [](const LocalError& e, const std::string& key) {
    for (const auto& d : e.rows)
      if (d.key() == key) return d;
    throw std::logic_error("no row " + key);
  };
  // Activations 2^16 times smaller (~1e-5): below 2^-14 fp16 is subnormal, and gfx90a's fp16
  // MFMA flushes subnormal operands to zero; bf16 has float32's exponent range.
  const auto small = scaled("L00.attn.q_a", 0, 1.0 / 65536);
  const LocalError gs = measure("matmul_input=bf16", lin, small), bs = measure("matmul_input=fp16", lin, small);
  EXPECT_NEAR(row(gs, "L00.attn.q_a/out").metrics.rel_l2, row(g1, "L00.attn.q_a/out").metrics.rel_l2, 1e-12);
  EXPECT_GT(row(bs, "L00.attn.q_a/out").metrics.rel_l2, 0.5);
  // 2^16 times larger: fp16 operands overflow.
  const LocalError bl = measure("matmul_input=fp16", lin, scaled("L00.attn.q_a", 0, 65536.0));
  EXPECT_GT(row(bl, "L00.attn.q_a/out").metrics.new_nonfinite, 0);
}

// ---- Knobs that only matter under a condition --------------------------------------------------

TEST_F(EmuKnobs, AdditiveMaskReadsMaskedBlocks) {
  // With the sink in every row, exp(finfo.min - m) is exactly 0 in every format: on finite
  // keys an additive mask gives the same bits as -inf (the spec says so, 5.4).
  const LocalError b = bad("mask_style"), g = good("mask_style");
  ASSERT_EQ(b.rows.size(), g.rows.size());
  for (std::size_t i = 0; i < b.rows.size(); ++i) EXPECT_EQ(b.rows[i].metrics.rel_l2, g.rows[i].metrics.rel_l2);
  // What differs: a -inf kernel skips the blocks a query sees nothing of; an additive one reads
  // them and multiplies their values by p = 0. KV-cache slots that were never written (row 1's
  // padding, keys 64..127: one whole block) hold garbage, here NaN: 0 x NaN = NaN.
  const auto garbage = [](const Stage& s, std::vector<Tensor>& in, std::vector<Tensor>&) {
    if (s.name != "L00.attn.core") return false;
    const auto S = in[1].dim(1), d = in[1].dim(2);
    double* kv = in[1].data<double>() + S * d;  // row 1
    for (std::int64_t j = 64; j < S; ++j)
      for (std::int64_t c = 0; c < d; ++c) kv[j * d + c] = NAN;
    return true;
  };
  const std::vector<OpKind> attn = {OpKind::attention};
  const LocalError gn = measure("mask_style=neg_inf", attn, garbage), bn = measure("mask_style=additive", attn, garbage);
  EXPECT_EQ(gn.nonfinite, 0);
  EXPECT_EQ(gn.rows[0].metrics.rel_l2, g.rows[0].metrics.rel_l2);  // never read
  EXPECT_GT(bn.nonfinite, 0);
}

TEST_F(EmuKnobs, RoutingNormEpsMattersWhenTheSelectedScoresUnderflow) {
  // In float32 the +1e-20 is absorbed by any sum of scores near 1: identical bits.
  const LocalError b = bad("routing_norm_eps"), g = good("routing_norm_eps");
  for (std::size_t i = 0; i < b.rows.size(); ++i) EXPECT_EQ(b.rows[i].metrics.rel_l2, g.rows[i].metrics.rel_l2);
  // Scores that underflow to 0 (a saturated router, or 16-bit scores of very negative logits)
  // for the experts a token selected: the reference's 0 / (0 + 1e-20) = 0, without it 0/0.
  const auto zero = [](const Stage& s, std::vector<Tensor>& in, std::vector<Tensor>& ref) {
    if (s.name != "L01.moe.weights") return false;
    const auto E = in[0].dim(1), K = in[1].dim(1);
    for (std::int64_t t = 0; t < 8; ++t)
      for (std::int64_t k = 0; k < K; ++k) in[0].data<double>()[t * E + in[1].data<std::int64_t>()[t * K + k]] = 0.0;
    refcpu::RefCpuBackend refb;
    std::vector<const Tensor*> ptrs;
    for (const auto& x : in) ptrs.push_back(&x);
    RunContext ctx = main_->context();
    ref = refb.run(s, ptrs, ctx);
    return true;
  };
  const std::vector<OpKind> w = {OpKind::moe_weights};
  EXPECT_EQ(measure("routing_norm_eps=on", w, zero).nonfinite, 0);
  EXPECT_GT(measure("routing_norm_eps=off", w, zero).nonfinite, 0);
}

TEST_F(EmuKnobs, SharedClipMattersWhenClippingIsActive) {
  // swiglu_limit 10: the tiny model's pre-activations (~N(0,1)) never reach it: same bits.
  const LocalError b = bad("shared_clip"), g = good("shared_clip");
  for (std::size_t i = 0; i < b.rows.size(); ++i) EXPECT_EQ(b.rows[i].metrics.rel_l2, g.rows[i].metrics.rel_l2);
  // The spec's clipping-active variant (swiglu_limit 0.4): the unclipped shared expert is wrong.
  const LocalError bc = bad("shared_clip", {}, clip_case()), gc = good("shared_clip", {}, clip_case());
  EXPECT_GT(bc.rel_l2, 10 * gc.rel_l2) << factor(bc, gc);
}

// ---- Coverage ---------------------------------------------------------------------------------------

TEST_F(EmuKnobs, EveryKnobOfTheCatalogHasATestHere) {
  const std::set<std::string> tested = {
      "stream", "matmul_accum", "qk_accum", "pv_accum", "softmax_stats", "rescale_order", "router", "reduction",
      "logits", "norm_stats", "rope_angle", "sinkhorn", "hc_eps", "pool_softmax", "index_score", "routing_bias",
      "topk_compare", "topk_ties", "storage", "matmul_input", "mask_style", "routing_norm_eps", "shared_clip"};
  std::set<std::string> catalog;
  for (const auto& k : knob_catalog()) catalog.insert(k.name);
  EXPECT_EQ(tested, catalog);
}

TEST(KnobCatalog, EveryNumericsFieldHasAKnobRow) {
  // One row per field: as many rows as Numerics has fields, and no field set by two rows.
  EXPECT_EQ(testing::field_count<Numerics>(), knob_catalog().size());
  for (std::size_t a = 0; a < knob_catalog().size(); ++a)
    for (std::size_t b = a + 1; b < knob_catalog().size(); ++b)
      EXPECT_FALSE(knob_catalog()[a].member == knob_catalog()[b].member)
          << knob_catalog()[a].name << " and " << knob_catalog()[b].name << " set the same field";
  // Each row's values set only its own field.
  for (const auto& k : knob_catalog())
    for (const auto& v : k.values) {
      Numerics n;
      set_knob(n, k.name, v);
      for (const auto& other : knob_catalog())
        if (&other != &k) EXPECT_EQ(get_knob(n, other.name), other.good) << k.name << "=" << v << " moved " << other.name;
    }
}

}  // namespace
}  // namespace tdiff
