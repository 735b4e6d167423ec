// Systematic errors on real data (diff/systematic.h): a dump of the reference with one planted
// change FAILs with the slice named in every report, through `run --candidate-dump` and
// `compare`; `systematic=0` silences it; a correct bf16 port (emu under `fixed`) stays clean.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "casefile/h5io.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::slurp;

class CliSystematic : public testing::CliTest {
 protected:
  void make_case(const std::string& profile) {
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 {} -o '{}'", profile, path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 24 --seed 2 -o '{}'", path("m"), path("c.h5"))).code, 0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  std::string c() const { return "'" + path("c.h5") + "'"; }
  Tensor reference(const std::string& key) const { return h5_read(path("c.h5"), "/reference/" + key); }

  // A float32 dump of the reference's `key`, changed by `plant` (an engine's dump: its own
  // rounding is float32's).
  std::string planted(const std::string& key, const std::function<void(Tensor&)>& plant) const {
    Tensor t = reference(key);
    plant(t);
    const Tensor f = t.to(DType::f32);
    const std::string out = path("dump.h5");
    std::filesystem::remove(out);
    Tap tap(out);
    tap.write_raw(key, "f32", f.raw(), f.shape());
    tap.close();
    return out;
  }
  CliResult judge(const std::string& dump, const std::string& extra = "") const {
    return run(fmt::format("run {} --candidate-dump '{}' -o '{}' {}", c(), dump, path("rep"), extra));
  }
};

// [B, S, H, d]: every element of head `h` through `f`.
void each_of_head(Tensor& t, std::int64_t h, const std::function<void(double&)>& f) {
  const auto& s = t.shape();
  double* v = t.data<double>();
  for (std::int64_t bs = 0; bs < s[0] * s[1]; ++bs)
    for (std::int64_t c = 0; c < s[3]; ++c) f(v[(bs * s[2] + h) * s[3] + c]);
}

TEST_F(CliSystematic, AScaledHeadFailsWithTheHeadNamedInEveryReport) {
  make_case("");
  const std::string dump = planted("L02.attn.core/o", [](Tensor& t) { each_of_head(t, 1, [](double& x) { x *= 1.005; }); });
  const CliResult r = judge(dump);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const std::string says = "head 1 of L02.attn.core/o scaled by 1.0050";
  EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
  EXPECT_NE(slurp(path("rep/report.csv")).find(says), std::string::npos);
  EXPECT_NE(slurp(path("rep/report.html")).find(says), std::string::npos);
  EXPECT_NE(slurp(path("rep/junit.xml")).find(says), std::string::npos);
  const auto j = nlohmann::json::parse(slurp(path("rep/report.json")));
  bool found = false;
  for (const auto& row : j["rows"])
    if (row["stage"] == "L02.attn.core") {
      const auto& top = row["systematic"]["findings"][0];
      EXPECT_EQ(top["slice"], "head 1");
      EXPECT_EQ(top["fault"], "scale");
      EXPECT_TRUE(top["fired"].get<bool>());
      EXPECT_NEAR(top["value"].get<double>(), 1.005, 1e-4);
      found = true;
    }
  EXPECT_TRUE(found) << j.dump().substr(0, 2000);
  // The generic compare of the case and the dump finds the same slice.
  const CliResult cmp = run(fmt::format("compare {} '{}' --no-reports", c(), dump));
  EXPECT_EQ(cmp.code, 1) << cmp.out << cmp.err;
  EXPECT_NE(cmp.out.find(says), std::string::npos) << cmp.out;
  // Silenced per stage by the threshold key.
  const CliResult off = judge(dump, "--no-reports --threshold 'L02.attn.core:systematic=0'");
  EXPECT_EQ(off.code, 0) << off.out << off.err;
}

TEST_F(CliSystematic, SwappedHeadsABiasedChannelAndAShiftedTokenAreNamed) {
  make_case("--profile trained");
  const std::string swap = planted("L02.attn.core/o", [](Tensor& t) {
    std::vector<double> one, two;
    each_of_head(t, 1, [&](double& x) { one.push_back(x); });
    each_of_head(t, 2, [&](double& x) { two.push_back(x); });
    std::size_t i = 0, j = 0;
    each_of_head(t, 1, [&](double& x) { x = two[i++]; });
    each_of_head(t, 2, [&](double& x) { x = one[j++]; });
  });
  CliResult r = judge(swap, "--no-reports");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("head 1 and head 2 of L02.attn.core/o swapped"), std::string::npos) << r.out;

  // One channel of ffn_norm's z [B, S, D] offset by 2% of the tensor's rms.
  const std::string bias = planted("L01.ffn_norm/z", [](Tensor& t) {
    double ss = 0;
    for (double v : t.span<double>()) ss += v * v;
    const double rms = std::sqrt(ss / static_cast<double>(t.numel()));
    for (std::int64_t i = 0; i < t.numel() / t.dim(-1); ++i) t.data<double>()[i * t.dim(-1) + 7] += 0.02 * rms;
  });
  r = judge(bias, "--no-reports");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("ch 7 of L01.ffn_norm/z offset by"), std::string::npos) << r.out;

  // Token 5 of row 1 of the same tensor shifted by 2% of its rms.
  const std::string shift = planted("L01.ffn_norm/z", [](Tensor& t) {
    const std::int64_t D = t.dim(-1), S = t.dim(1);
    double ss = 0;
    for (double v : t.span<double>()) ss += v * v;
    const double rms = std::sqrt(ss / static_cast<double>(t.numel()));
    for (std::int64_t c = 0; c < D; ++c) t.data<double>()[(1 * S + 5) * D + c] += 0.02 * rms;
  });
  r = judge(shift, "--no-reports");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("row 1, token 5 of L01.ffn_norm/z offset by"), std::string::npos) << r.out;
}

// A correct port: no systematic finding on either profile (its CSV's systematic column empty).
TEST_F(CliSystematic, FixedOnEmuStaysClean) {
  for (const std::string profile : {"", "--profile trained"}) {
    std::filesystem::remove_all(path("m"));
    std::filesystem::remove(path("c.h5"));
    make_case(profile);
    const CliResult r = run(fmt::format("run {} --policy fixed -o '{}'", c(), path("rep")));
    ASSERT_NE(r.code, 2) << r.err;
    const std::string csv = slurp(path("rep/report.csv"));
    EXPECT_EQ(csv.find("scaled by"), std::string::npos) << profile << "\n" << csv;
    EXPECT_EQ(csv.find("offset by"), std::string::npos) << profile;
    EXPECT_EQ(csv.find("swapped"), std::string::npos) << profile;
    EXPECT_NE(csv.find("systematic_score"), std::string::npos);
    std::filesystem::remove_all(path("rep"));
  }
}

}  // namespace
}  // namespace tdiff
