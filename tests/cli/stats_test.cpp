// The trained synthetic profile and the model statistics (tdiff synth --profile trained,
// tdiff stats): the profile's statistics land in their target ranges on tiny, the default
// profile's do not, and the command's outputs and errors.
#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "casefile/session.h"
#include "synth/synth.h"
#include "synth/synth_profile.h"
#include "checks/model_stats.h"

namespace tdiff {
namespace {

using testing::CliTest;
using testing::CliResult;
using testing::slurp;

class TrainedProfile : public CliTest {
 protected:
  // A tiny model of `profile`, and a case of two 40-token prompts with the trained profile's
  // massive-activation ids among them (as a real prompt's first token and delimiters carry them).
  std::string make_case(const std::string& profile, std::uint64_t seed) {
    const std::string m = path(profile), c = path(profile + ".h5"), tok = path("tokens.txt");
    EXPECT_EQ(run(fmt::format("synth --preset tiny --profile {} --seed {} -o '{}'", profile, seed, m)).code, 0);
    const SynthOutliers massive = synth_massive(synth_preset("tiny"), seed);
    std::ofstream out(tok);
    for (int row = 0; row < 2; ++row) {
      for (int i = 0; i < 40; ++i) {
        const bool carrier = i == 0 || i == 17 + row;
        out << (carrier ? massive.token_ids[static_cast<std::size_t>(i + row) % massive.token_ids.size()] : (37 * i + 11 * row + 5) % 256)
            << (i < 39 ? " " : "\n");
      }
    }
    out.close();
    EXPECT_EQ(run(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", m, tok, c)).code, 0);
    EXPECT_EQ(run(fmt::format("golden '{}'", c)).code, 0);
    return c;
  }
  ModelStats stats_of(const std::string& c) {
    CaseSession s = open_session(c);
    return compute_model_stats(s);
  }
};

// The published ranges the trained profile aims at (docs/guide/synthetic-models.md, tdiff
// stats): attention logits of tens below QK-Clip's 100, sink heads, activations 10^3-10^4 times
// the median, router margins of a few bf16 steps. The default profile stays in the ones of a
// random model.
TEST_F(TrainedProfile, StatisticsLandInTheirTargetRangesOnTiny) {
  const ModelStats t = stats_of(make_case("trained", 1));
  ASSERT_EQ(t.layers.size(), 4u);
  double sink_mass = 0, sink_heads = 0;
  for (const auto& l : t.layers) {
    SCOPED_TRACE(fmt::format("trained L{:02d}", l.layer));
    EXPECT_GE(l.max_logit, 15.0);
    EXPECT_LE(l.max_logit, 100.0);
    EXPECT_LT(l.entropy.p10, 0.3);  // sharp heads: nearly one outcome
    EXPECT_GT(l.entropy.p90, 0.8);  // and broad ones
    EXPECT_GE(l.act_ratio, 300.0);
    EXPECT_LE(l.act_ratio, 1e4);
    EXPECT_GE(l.act_max, 500.0);
    if (l.routed) EXPECT_LT(l.margin.p50, 0.025);
    if (l.routed) EXPECT_LT(l.margin.p10, 0.0078);  // two bf16 steps at scores near 0.8
    sink_mass += l.sink_mass / 4, sink_heads += l.sink_heads / 4;
  }
  // Many heads put most of their mass on the sink (4 heads a layer: judged over the model).
  EXPECT_GE(sink_mass, 0.3);
  EXPECT_GE(sink_heads, 0.3);
  const ModelStats d = stats_of(make_case("default", 1));
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    SCOPED_TRACE(fmt::format("default L{:02d}", i));
    EXPECT_LT(d.layers[i].max_logit, 10.0);
    EXPECT_LT(d.layers[i].act_ratio, 100.0);
    if (d.layers[i].routed) EXPECT_GT(d.layers[i].margin.p50, 2 * t.layers[i].margin.p50);
  }
}

TEST_F(TrainedProfile, DeterministicAndOnlyTheDocumentedWeightsChange) {
  for (const char* dir : {"a", "b"})
    ASSERT_EQ(run(fmt::format("synth --preset tiny --profile trained --seed 3 -o '{}'", path(dir))).code, 0);
  EXPECT_EQ(slurp(path("a/model.safetensors")), slurp(path("b/model.safetensors")));
  const ModelConfig c = synth_preset("tiny");
  const SynthOptions trained{false, DType::f32, SynthProfile::trained};
  for (const auto& [name, spec] : expected_weights(c)) {
    const Tensor a = synth_weight(c, name, spec, 3), b = synth_weight(c, name, spec, 3, trained);
    const bool same = std::equal(a.raw(), a.raw() + a.nbytes(), b.raw());
    const bool documented = trained_draw(c, name, spec.shape) || trained_scale(c, name, 3) || name == "model.embed_tokens.weight";
    EXPECT_EQ(same, !documented) << name;
  }
  const auto gains = trained_head_gains(c, "model.layers.0.self_attn.q_b_proj.weight", 3);
  EXPECT_EQ(gains.size(), 4u);
  for (double a : gains) EXPECT_TRUE(a == 0.25 || a == 0.5 || a == 1 || a == 2 || a == 4) << a;
  EXPECT_EQ(std::set<double>(gains.begin(), gains.end()).size(), 4u);  // broad and sharp heads in every layer
}

TEST_F(TrainedProfile, ReleaseFormatAndBadFlags) {
  const CliResult r = run(fmt::format("synth --preset tiny --profile trained --format release --seed 1 -o '{}'", path("rel")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained profile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("carry massive activations"), std::string::npos) << r.out;
  const CliResult both = run(fmt::format("synth --preset tiny --profile trained --outliers --seed 1 -o '{}'", path("x")));
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--outliers is part of --profile trained"), std::string::npos) << both.err;
  EXPECT_EQ(run(fmt::format("synth --preset tiny --profile sharp --seed 1 -o '{}'", path("y"))).code, 2);
}

using ModelStatsCli = TrainedProfile;

TEST_F(ModelStatsCli, PrintsWritesAndNamesWhatIsMissing) {
  const std::string c = make_case("trained", 2);
  const CliResult r = run(fmt::format("stats '{}' --csv '{}' --json '{}'", c, path("s.csv"), path("s.json")));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* row : {"L00   sliding", "L01   csa", "L02   hca", "(hash layer"}) EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  EXPECT_EQ(testing::count_lines(slurp(path("s.csv"))), 5u);
  const auto j = nlohmann::json::parse(slurp(path("s.json")));
  ASSERT_EQ(j["layers"].size(), 4u);
  const ModelStats m = stats_of(c);
  const double stored_max = j["layers"][2]["max_logit"];
  EXPECT_DOUBLE_EQ(stored_max, m.layers[2].max_logit);
  EXPECT_TRUE(j["layers"][0]["margin_p50"].is_null());  // a hash layer

  // tdiff run shows the same table in report.html and, with --stats, writes it beside the reports.
  const CliResult run_r = run(fmt::format("run '{}' --stats -o '{}'", c, path("rep")));
  EXPECT_LE(run_r.code, 1) << run_r.err;
  EXPECT_NE(slurp(path("rep/report.html")).find("id=\"model-stats\""), std::string::npos);
  EXPECT_EQ(slurp(path("rep/stats.csv")), slurp(path("s.csv")));

  const std::string partial = path("partial.h5");
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 1 -o '{}'", path("trained"), partial)).code, 0);
  ASSERT_EQ(run(fmt::format("golden '{}' --stages 'L0*.attn.core,lm_head'", partial)).code, 0);
  const CliResult miss = run(fmt::format("stats '{}'", partial));
  EXPECT_EQ(miss.code, 2);
  EXPECT_NE(miss.err.find("/reference lacks L00.attn.q_rope/q"), std::string::npos) << miss.err;
  EXPECT_EQ(testing::count_lines(miss.err), 1u);
}

}  // namespace
}  // namespace tdiff
