// covers: idx_score, idx_topk
// hip::idx_score against emu::indexer_scores (ulps of index_score) and refcpu (float64);
// hip::idx_topk against emu's selection (emu_backend's idx_topk: topk, sort, causal filter)
// exactly, for both tie rules on tie-heavy scores, and against refcpu::topk_select where the
// rules coincide. S = 45, μ = 4, n = 11, d_I = 40 (a partial LDS chunk), H_I = 5; a
// left-padded row (negative positions: no causal entry).
#include <map>

#include "emu/numerics.h"
#include "emu/topk.h"
#include "gpu_test.h"
#include "hip/indexer.h"
#include "refcpu/indexer.h"

namespace tdiff::gputest {
namespace {

constexpr std::int64_t kB = 2, kS = 45, kRate = 4, kN = 11, kHeads = 5, kDim = 40;
const std::vector<std::int64_t> kLength{45, 42};

std::vector<std::int64_t> positions() {  // row 1 is left-padded by 3
  std::vector<std::int64_t> pos(kB * kS);
  for (std::int64_t i = 0; i < kS; ++i) pos[i] = i, pos[kS + i] = i - 3;
  return pos;
}

TEST(HipIndexer, ScoreMatchesEmuAndReferencePerKnob) {
  auto rng = test_rng();
  const auto pos = positions();
  std::map<std::string, Numerics> settings;
  settings["fixed"] = Numerics{};
  settings["index_score=bf16"].index_score = DType::bf16;
  settings["index_score=fp16"].index_score = DType::f16;
  std::map<std::string, double> err_hip, err_emu;
  for (const auto& [name, num] : settings) {
    const auto st = emu::fmt_of(num.storage), f = emu::fmt_of(num.index_score);
    auto rng_setting = rng;  // the same inputs for every setting
    auto& rng = rng_setting;
    auto QI = random_values(rng, kB * kS * kHeads * kDim, -1.0f, 1.0f, st);
    auto KI = random_values(rng, kB * kN * kDim, -1.0f, 1.0f, st);
    auto w = random_values(rng, kB * kS * kHeads, -1.0f, 1.0f, f);
    std::vector<float> s_emu(kB * kS * kN);
    std::vector<double> s_ref(s_emu.size());
    const auto QId = to_double(QI), KId = to_double(KI), wd = to_double(w);
    for (std::int64_t b = 0; b < kB; ++b) {
      emu::indexer_scores(QI.data() + b * kS * kHeads * kDim, KI.data() + b * kN * kDim, w.data() + b * kS * kHeads,
                          pos.data() + b * kS, kS, kN, kLength[b] / kRate, kHeads, kDim, kRate, f,
                          s_emu.data() + b * kS * kN);
      refcpu::indexer_scores(QId.data() + b * kS * kHeads * kDim, KId.data() + b * kN * kDim,
                             wd.data() + b * kS * kHeads, pos.data() + b * kS, kS, kN, kLength[b] / kRate, kHeads, kDim,
                             kRate, s_ref.data() + b * kS * kN);
    }
    Dev<float> d_QI(QI), d_KI(KI), d_w(w);
    Dev<std::int64_t> d_pos(pos), d_len(kLength);
    Dev<float> d_score(s_emu.size());
    hip::idx_score(d_QI.ptr(), d_KI.ptr(), d_w.ptr(), d_pos.ptr(), d_len.ptr(), kB, kS, kN, kHeads, kDim, kRate,
                   emu::indexer_spec(num), d_score.ptr(), test_stream());
    const auto s_hip = d_score.get();
    const UlpStats u = ulp_stats(s_hip, s_emu, f);
    err_hip[name] = error_vs(s_hip, s_ref).scaled, err_emu[name] = error_vs(s_emu, s_ref).scaled;
    std::printf("idx_score %-18s vs emu: max %.0f ulp, %zu of %zu differ | vs refcpu: hip %.3e emu %.3e\n", name.c_str(),
                u.max_ulps, u.differ, u.count, err_hip[name], err_emu[name]);
    // Only products, sums and one max: no transcendental, so bit-identical to emu.
    EXPECT_EQ(u.max_ulps, 0.0) << name;
  }
  EXPECT_LE(err_hip["fixed"], 1e-5);  // float32 throughout
  EXPECT_GT(err_hip["index_score=bf16"], err_hip["fixed"]);
  EXPECT_GT(err_hip["index_score=fp16"], err_hip["fixed"]);
}

// emu_backend's idx_topk for one token: emu::topk, the picks ascending, non-causal dropped.
std::vector<std::int64_t> emu_select(const float* score, std::int64_t k, std::int64_t causal, const hip::TopkSpec& spec,
                                     std::uint64_t token) {
  std::vector<std::int64_t> pick(k), out;
  emu::topk(score, kN, k, spec.cmp, spec.ties, spec.seed ^ token, pick.data());
  std::sort(pick.begin(), pick.end());
  for (auto w : pick)
    if (w < causal) out.push_back(w);
  out.resize(k, -1);
  return out;
}

TEST(HipIndexer, TopkMatchesEmuExactlyForBothTieRules) {
  auto rng = test_rng();
  const auto pos = positions();
  const std::int64_t k = 6;
  // Tie-heavy scores: multiples of 1/8 in [-1, 1), plus the −∞ of non-causal entries.
  std::uniform_int_distribution<int> eighth(-8, 7);
  std::vector<float> score(kB * kS * kN);
  std::vector<std::int64_t> causal(kB * kS);
  for (std::int64_t t = 0; t < kB * kS; ++t) {
    const std::int64_t b = t / kS, p = pos[t];
    causal[t] = std::min(p + 1 >= 0 ? (p + 1) / kRate : 0, kLength[b] / kRate);
    for (std::int64_t e = 0; e < kN; ++e)
      score[t * kN + e] = e < causal[t] ? eighth(rng) / 8.0f + 1e-3f * static_cast<float>(e % 2) : -INFINITY;
  }
  Dev<float> d_score(score);
  Dev<std::int64_t> d_pos(pos), d_len(kLength);
  auto run = [&](const hip::TopkSpec& spec) {
    Dev<std::int64_t> d_sel(kB * kS * k);
    hip::idx_topk(d_score.ptr(), d_pos.ptr(), d_len.ptr(), kB, kS, kN, k, kRate, spec, d_sel.ptr(), test_stream());
    return d_sel.get();
  };
  for (const auto cmp : {arith::Fmt::f32, arith::Fmt::bf16, arith::Fmt::f16})
    for (const auto ties : {TieBreak::index, TieBreak::unstable}) {
      const hip::TopkSpec spec{cmp, ties, 0x1234abcdull};
      const auto sel = run(spec);
      std::size_t mismatched = 0;
      for (std::int64_t t = 0; t < kB * kS; ++t) {
        const auto want = emu_select(score.data() + t * kN, k, causal[t], spec, static_cast<std::uint64_t>(t));
        mismatched += !std::equal(want.begin(), want.end(), sel.begin() + t * k);
      }
      EXPECT_EQ(mismatched, 0u) << "cmp " << int(cmp) << " ties " << int(ties);
    }
  // The index rule in float32 is the reference's own rule.
  const auto sel = run({arith::Fmt::f32, TieBreak::index, 0});
  for (std::int64_t t = 0; t < kB * kS; ++t) {
    std::vector<double> sd(score.begin() + t * kN, score.begin() + (t + 1) * kN);
    std::vector<std::int64_t> want(k);
    refcpu::topk_select(sd.data(), kN, k, causal[t], TieRule::lowest_index, want.data());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), sel.begin() + t * k)) << "token " << t;
  }
  // Unstable ties depend on the run seed: another seed picks differently on some token.
  const auto a = run({arith::Fmt::bf16, TieBreak::unstable, 1}), b = run({arith::Fmt::bf16, TieBreak::unstable, 2});
  EXPECT_NE(a, b);
}

// The indexer at v4-flash dimensions (S = 1024, μ = 4, n = 256, H_I = 64, d_I = 128,
// k = min(512, n)): scores bit-identical to emu, selections identical, both timed.
TEST(HipIndexer, FlashDimsMatchEmu) {
  auto rng = test_rng();
  const std::int64_t S = 1024, rate = 4, n = S / rate, heads = 64, dim = 128, k = 256;
  const Numerics num;
  auto QI = random_values(rng, S * heads * dim, -1.0f, 1.0f, arith::Fmt::bf16);
  auto KI = random_values(rng, n * dim, -1.0f, 1.0f, arith::Fmt::bf16);
  auto w = random_values(rng, S * heads, -1.0f, 1.0f, arith::Fmt::f32);
  std::vector<std::int64_t> pos(S), length{S};
  for (std::int64_t i = 0; i < S; ++i) pos[i] = i;
  std::vector<float> s_emu(S * n);
  emu::indexer_scores(QI.data(), KI.data(), w.data(), pos.data(), S, n, n, heads, dim, rate, arith::Fmt::f32,
                      s_emu.data());
  Dev<float> d_QI(QI), d_KI(KI), d_w(w);
  Dev<std::int64_t> d_pos(pos), d_len(length);
  Dev<float> d_score(S * n);
  Dev<std::int64_t> d_sel(S * k);
  const double ms_score = time_ms([&] {
    hip::idx_score(d_QI.ptr(), d_KI.ptr(), d_w.ptr(), d_pos.ptr(), d_len.ptr(), 1, S, n, heads, dim, rate,
                   emu::indexer_spec(num), d_score.ptr(), test_stream());
  });
  const hip::TopkSpec spec{arith::Fmt::f32, TieBreak::index, 7};
  const double ms_topk = time_ms([&] {
    hip::idx_topk(d_score.ptr(), d_pos.ptr(), d_len.ptr(), 1, S, n, k, rate, spec, d_sel.ptr(), test_stream());
  });
  const auto s_hip = d_score.get();
  const auto sel = d_sel.get();
  const UlpStats u = ulp_stats(s_hip, s_emu, arith::Fmt::f32);
  std::size_t mismatched = 0;
  for (std::int64_t t = 0; t < S; ++t) {
    std::vector<std::int64_t> pick(k), want;
    emu::topk(s_emu.data() + t * n, n, k, spec.cmp, spec.ties, spec.seed ^ static_cast<std::uint64_t>(t), pick.data());
    std::sort(pick.begin(), pick.end());
    const std::int64_t causal = std::min((pos[t] + 1) / rate, n);
    for (auto e : pick)
      if (e < causal) want.push_back(e);
    want.resize(k, -1);
    mismatched += !std::equal(want.begin(), want.end(), sel.begin() + t * k);
  }
  std::printf("idx_score S=1024 n=256 H_I=64 d_I=128: %.3f ms (vs emu max %.0f ulp); idx_topk k=256: %.3f ms\n",
              ms_score, u.max_ulps, ms_topk);
  EXPECT_EQ(u.max_ulps, 0.0);
  EXPECT_EQ(mismatched, 0u);
}

}  // namespace
}  // namespace tdiff::gputest
