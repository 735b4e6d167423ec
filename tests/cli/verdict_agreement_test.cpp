// One verdict everywhere and no silent data loss (issue 34 items 5 and 6): `compare` of a saved
// run judges its tensors as the run did, a dump missing an output of a stage it names is refused,
// verdict lines say what made the verdict, padding is counted alike for backends and dumps, and
// neither `case new` nor `golden --stages` throws a stored reference away without --force.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "casefile/h5io.h"
#include "cli_support.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::slurp;

// report.csv as "stage/tensor" -> its verdict, the rows in file order.
std::vector<std::pair<std::string, std::string>> csv_verdicts(const std::string& file) {
  std::vector<std::pair<std::string, std::string>> rows;
  const std::string text = slurp(file);
  std::size_t at = text.find('\n') + 1;  // past the header: stage,tensor,cosine,max_abs,rmse,rel_l2,verdict
  while (at < text.size()) {
    const std::string line = text.substr(at, text.find('\n', at) - at);
    at += line.size() + 1;
    std::vector<std::string> f;
    for (std::size_t p = 0, q; f.size() < 7; p = q + 1) {
      q = line.find(',', p);
      f.push_back(line.substr(p, q == std::string::npos ? std::string::npos : q - p));
      if (q == std::string::npos) break;
    }
    if (f.size() == 7) rows.emplace_back(f[0] + "/" + f[1], f[6]);
  }
  return rows;
}

// The tiny model, a case of the shipped prompts padded to 48 (66 real tokens of 96), its reference.
class CliVerdicts : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --tokens '{}/cases/tiny/prompts.txt' --seed 1 --pad-to 48 -o '{}'",
                              path("m"), TDIFF_SOURCE_DIR, path("c.h5")))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }
  std::string c() const { return "'" + path("c.h5") + "'"; }
  // A dump of reference tensors under `keys` (key -> the reference tensor it copies).
  void dump(const std::string& out, const std::map<std::string, std::string>& keys) const {
    Tap tap(out);
    for (const auto& [key, from] : keys) {
      const Tensor t = h5_read(path("c.h5"), "/reference/" + from);
      tap.write_raw(key, std::string(dtype_name(t.dtype())), t.raw(), t.shape());
    }
    tap.close();
  }
  std::size_t reference_tensors() const { return h5_list_datasets(path("c.h5"), "/reference").size(); }
};

// run --save and compare of what it saved: the same rows with the same verdicts, whatever the
// policy, the selection mode, the --stages and the thresholds the run was given.
TEST_F(CliVerdicts, CompareOfASavedRunGivesTheRunsVerdicts) {
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"fixed", "--policy fixed"},
      {"naive", "--policy naive"},
      {"free", "--policy naive --selections free"},
      {"replay", "--policy fixed --selections replay"},
      {"stages", "--policy naive --stages 'L0[1-2].*'"},
      {"thresholds", "--policy naive --threshold cosine_warn=0.99999"},
  };
  for (const auto& [id, flags] : runs) {
    const CliResult r = run(fmt::format("run {} {} --seed 3 --save --run-id {} -o '{}'", c(), flags, id, path(id)));
    ASSERT_LE(r.code, 1) << id << r.out << r.err;
    const CliResult cmp = run(fmt::format("compare {} {} --group-a /reference --group-b /runs/{} -o '{}'", c(), c(), id,
                                          path(id + "-cmp")));
    EXPECT_EQ(cmp.code, r.code) << id << cmp.out << cmp.err;
    const auto ran = csv_verdicts(path(id + "/report.csv")), compared = csv_verdicts(path(id + "-cmp/report.csv"));
    ASSERT_FALSE(ran.empty()) << id;
    EXPECT_EQ(compared, ran) << id << ": " << cmp.out;
    const auto jr = nlohmann::json::parse(slurp(path(id + "/report.json")));
    const auto jc = nlohmann::json::parse(slurp(path(id + "-cmp/report.json")));
    EXPECT_EQ(jc.at("verdict"), jr.at("verdict")) << id;
    EXPECT_EQ(jc.at("counts"), jr.at("counts")) << id;
  }
}

// A dump naming a stage holds every output of it: lm_head without logits was skipped (exit 0).
TEST_F(CliVerdicts, ADumpLackingAnOutputOfAStageItNamesIsRefused) {
  dump(path("nologits.h5"), {{"embed/e", "embed/e"}, {"lm_head/hidden", "final.norm/out"}});
  for (const std::string& cmd : {fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("nologits.h5")),
                                 fmt::format("compare {} '{}' --no-reports", c(), path("nologits.h5"))}) {
    const CliResult r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << r.out << r.err;
    EXPECT_NE(r.err.find("stage lm_head lacks lm_head/logits (it holds lm_head/hidden)"), std::string::npos) << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  }
  dump(path("router.h5"), {{"L00.moe.router/logit", "L00.moe.router/logit"}});
  const CliResult r = run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("router.h5")));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("lacks L00.moe.router/score"), std::string::npos) << r.err;
  // Whole stages, and stages left out entirely, are still judged (the missing listed).
  dump(path("whole.h5"), {{"embed/e", "embed/e"}, {"lm_head/logits", "lm_head/logits"}});
  EXPECT_EQ(run(fmt::format("run {} --candidate-dump '{}' --no-reports", c(), path("whole.h5"))).code, 0);
}

// A WARN that comes from tensors on one side only says so in every report, beside the counts.
TEST_F(CliVerdicts, VerdictLinesSayWhatMadeTheVerdict) {
  dump(path("part.h5"), {{"embed/e", "embed/e"}, {"lm_head/logits", "lm_head/logits"}});
  const CliResult r = run(fmt::format("compare {} '{}' -o '{}'", c(), path("part.h5"), path("rep")));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string line = "WARN (179 tensors on one side only): 0 FAIL, 0 WARN, 2 PASS of 2 tensors; 179 only in the "
                           "reference, 0 only in the candidate";
  // The terminal puts the one-sided counts on a line of their own (100 columns).
  EXPECT_NE(r.out.find("verdict WARN (179 tensors on one side only): 0 FAIL, 0 WARN, 2 PASS of 2 tensors\n            "
                       "179 only in the reference, 0 only in the candidate\n"),
            std::string::npos)
      << r.out;
  const auto j = nlohmann::json::parse(slurp(path("rep/report.json")));
  EXPECT_EQ(j.at("verdict_cause"), "179 tensors on one side only");
  EXPECT_EQ(j.at("verdict_line"), line);
  EXPECT_EQ(j.at("counts").at("only_ref"), 179);
  EXPECT_NE(slurp(path("rep/report.html")).find(line), std::string::npos);
  EXPECT_NE(slurp(path("rep/junit.xml")).find("<property name=\"verdict\" value=\"" + line + "\"/>"), std::string::npos);

  const CliResult all = run(fmt::format("run {} --policy fixed --no-reports", c()));
  EXPECT_NE(all.out.find("verdict PASS (every tensor PASS): 0 FAIL, 0 WARN, 181 PASS of 181 tensors\n"),
            std::string::npos)
      << all.out;
  const CliResult naive = run(fmt::format("run {} --policy naive --seed 3 --no-reports", c()));
  EXPECT_NE(naive.out.find("verdict FAIL ("), std::string::npos) << naive.out;
  EXPECT_NE(naive.out.find(" tensors FAIL): "), std::string::npos) << naive.out;
}

// Logits and selections count real tokens for a backend as for a dump of the same numbers.
TEST_F(CliVerdicts, PaddingIsCountedAlikeForBackendsAndDumps) {
  const int status = std::system(fmt::format("'{}' {} naive 7 '{}' run >/dev/null", TAP_EMU_BIN, c(), path("emu.h5")).c_str());
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const CliResult emu = run(fmt::format("run {} --policy naive --seed 7 --selections free -o '{}'", c(), path("emu")));
  const CliResult dmp =
      run(fmt::format("run {} --candidate-dump '{}' --dump-policy naive -o '{}'", c(), path("emu.h5"), path("dump")));
  ASSERT_LE(emu.code, 1) << emu.err;
  ASSERT_EQ(dmp.code, emu.code) << dmp.out << dmp.err;
  const std::string said = "of 66 real tokens (30 padding tokens left out)";
  EXPECT_NE(emu.out.find(said), std::string::npos) << emu.out;
  EXPECT_NE(dmp.out.find(said), std::string::npos) << dmp.out;
  const auto je = nlohmann::json::parse(slurp(path("emu/report.json")));
  const auto jd = nlohmann::json::parse(slurp(path("dump/report.json")));
  EXPECT_EQ(je.at("padding_tokens"), 30);
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& row : jd.at("rows")) by_key[row.at("stage").get<std::string>() + "/" + row.at("tensor").get<std::string>()] = row;
  int per_token = 0;
  for (const auto& row : je.at("rows")) {
    const std::string key = row.at("stage").get<std::string>() + "/" + row.at("tensor").get<std::string>();
    for (const char* stat : {"logits", "routing"}) {
      if (!row.contains(stat)) continue;
      ++per_token;
      ASSERT_TRUE(by_key.count(key)) << key;
      // The worst tokens' indices are among all tokens for a backend (its locations) and among
      // the real ones for a dump (compacted); the statistics themselves are the same.
      nlohmann::json a = row.at(stat), b = by_key[key].at(stat);
      for (auto* j : {&a, &b})
        if (j->contains("worst_tokens"))
          for (auto& t : j->at("worst_tokens")) t.erase("token");
      EXPECT_EQ(a, b) << key << " " << stat;
      EXPECT_EQ(row.at(stat).at("tokens"), 66) << key;
    }
  }
  EXPECT_GT(per_token, 4);  // the logits and every layer's selections
}

TEST_F(CliVerdicts, CaseNewDoesNotReplaceAFileWithoutForce) {
  const auto before = fs::file_size(path("c.h5"));
  const CliResult r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 1 -o {}", path("m"), c()));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(path("c.h5") + ": already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(fs::file_size(path("c.h5")), before);
  EXPECT_EQ(reference_tensors(), 181u);
  const CliResult forced =
      run(fmt::format("case new --model '{}' --random-prompts 1 --len 8 --seed 1 -o {} --force", path("m"), c()));
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_FALSE(h5_exists(path("c.h5"), "/reference"));
}

TEST_F(CliVerdicts, GoldenOfSomeStagesKeepsTheOthers) {
  const Tensor logits = h5_read(path("c.h5"), "/reference/lm_head/logits");
  const CliResult some = run(fmt::format("golden {} --stages 'lm_head,L01.attn.*'", c()));
  ASSERT_EQ(some.code, 0) << some.err;
  EXPECT_NE(some.err.find("stored stages kept"), std::string::npos) << some.err;
  EXPECT_EQ(reference_tensors(), 181u);
  const Tensor again = h5_read(path("c.h5"), "/reference/lm_head/logits");
  EXPECT_TRUE(std::equal(logits.raw(), logits.raw() + logits.nbytes(), again.raw()));
  EXPECT_EQ(run(fmt::format("run {} --policy fixed --no-reports", c())).code, 0);

  // Under another tie rule the stages not recomputed cannot be kept: refused, then --force.
  const auto before = fs::file_size(path("c.h5"));
  const CliResult tie = run(fmt::format("golden {} --stages lm_head --tie-rule torch-cpu", c()));
  EXPECT_EQ(tie.code, 2) << tie.err;
  EXPECT_EQ(testing::count_lines(tie.err), 1u) << tie.err;
  EXPECT_NE(tie.err.find("would drop the 152 stored stages it does not recompute"), std::string::npos) << tie.err;
  EXPECT_EQ(fs::file_size(path("c.h5")), before);
  EXPECT_EQ(reference_tensors(), 181u);
  const CliResult forced = run(fmt::format("golden {} --stages lm_head --tie-rule torch-cpu --force", c()));
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(reference_tensors(), 1u);
}

}  // namespace
}  // namespace tdiff
