// Issue 18, items 3-4 through the binary: knobs set where they do not apply, run --save and the
// compare example that reads it, the logits line of the terminal summary, and what every
// environment record carries (OS, kernel, CPU, GPU, model and case sha256, expanded policy).
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "history_support.h"
#include "casefile/case_file.h"
#include "formats/safetensors.h"
#include "base/sha256.h"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::count_lines;
using testing::slurp;

class CliHygiene : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 2 -o '{}'", path("m"))).code, 0);
    ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 2 --len 44 --seed 5 --pad-to 48 -o '{}'", path("m"),
                              path("c.h5")))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path("c.h5"))).code, 0);
  }

  // The fields of one CSV line (RFC 4180 quotes: "[2,48,256]" is one field).
  static std::vector<std::string> csv_fields(const std::string& line) {
    std::vector<std::string> out(1);
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') out.back() += line[++i];
      else if (line[i] == '"') quoted = !quoted;
      else if (line[i] == ',' && !quoted) out.emplace_back();
      else out.back() += line[i];
    }
    return out;
  }
  // report.csv rows by "stage/tensor": every column as text.
  static std::map<std::string, std::map<std::string, std::string>> csv_rows(const std::string& file) {
    std::istringstream in(slurp(file));
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = csv_fields(line);
    std::map<std::string, std::map<std::string, std::string>> rows;
    while (std::getline(in, line)) {
      const std::vector<std::string> f = csv_fields(line);
      std::map<std::string, std::string> row;
      for (std::size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
      rows[row["stage"] + "/" + row["tensor"]] = row;
    }
    return rows;
  }

  static std::string shell_out(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    for (char buf[256]; p && std::fgets(buf, sizeof buf, p);) out += buf;
    if (p) ::pclose(p);
    return out;
  }
};

// qk_accum belongs to the attention core: on a linear it would change nothing, so it is an input
// error naming the knob, the stage and the kinds it applies to, from --set and from a policy
// file alike; a glob that also reaches an attention core applies it there.
TEST_F(CliHygiene, KnobWhereItDoesNotApplyIsAnInputError) {
  const std::string c = path("c.h5");
  const CliResult one = run(fmt::format("run '{}' --no-reports --set 'L01.attn.q_a:qk_accum=fp16'", c));
  EXPECT_EQ(one.code, 2) << one.out;
  EXPECT_EQ(count_lines(one.err), 1u) << one.err;
  EXPECT_NE(one.err.find("--set 'L01.attn.q_a:qk_accum=fp16': knob 'qk_accum' does not apply to stage L01.attn.q_a "
                         "(operator kind linear); it applies to the operator kinds attention"),
            std::string::npos)
      << one.err;

  const CliResult many = run(fmt::format("run '{}' --no-reports --set 'L0*.moe.*:softmax_stats=fp16'", c));
  EXPECT_EQ(many.code, 2);
  EXPECT_NE(many.err.find("knob 'softmax_stats' does not apply to any of the"), std::string::npos) << many.err;
  EXPECT_NE(many.err.find("moe_experts"), std::string::npos) << many.err;  // a kind of the stages it matched
  EXPECT_NE(many.err.find("it applies to the operator kinds attention"), std::string::npos) << many.err;

  std::ofstream(path("p.toml")) << "preset = \"fixed\"\n[[override]]\nstages = \"L01.attn.q_a\"\nsinkhorn = \"fp16\"\n";
  const CliResult file = run(fmt::format("run '{}' --no-reports --policy '{}'", c, path("p.toml")));
  EXPECT_EQ(file.code, 2);
  EXPECT_NE(file.err.find("p.toml: knob 'sinkhorn' does not apply to stage L01.attn.q_a"), std::string::npos) << file.err;
  EXPECT_NE(file.err.find("hc_mix, hc_sinkhorn, hc_head"), std::string::npos) << file.err;
  // Every command that takes --set checks it.
  EXPECT_EQ(run(fmt::format("bisect '{}' --set 'lm_head:qk_accum=fp16'", c)).code, 2);

  const CliResult mixed = run(fmt::format("run '{}' --no-reports --set 'L01.attn.*:qk_accum=fp16'", c));
  EXPECT_LE(mixed.code, 1) << mixed.err;
}

// The compare example of `compare --help`, on tensors `run --save` kept: compare pairs them
// with the reference as the run did (one pairing driver) and judges them under the run's
// policy and selection mode, so every column of every row, verdicts and router flips included,
// is the run's own.
TEST_F(CliHygiene, SavedRunFeedsTheCompareExample) {
  const std::string c = path("c.h5");
  const CliResult r = run(fmt::format("run '{}' --save --run-id r1 -o '{}'", c, path("run")));
  ASSERT_LE(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("saved       candidate tensors under"), std::string::npos) << r.out;
  const CliResult all = run(fmt::format("compare '{}' '{}' --group-a /reference --group-b /runs/r1 -o '{}'", c, c, path("all")));
  ASSERT_EQ(all.code, r.code) << all.out << all.err;
  const auto ran = csv_rows(path("run/report.csv")), judged = csv_rows(path("all/report.csv"));
  ASSERT_EQ(judged.size(), ran.size());
  std::size_t flips = 0;
  for (const auto& [key, row] : judged) {
    ASSERT_TRUE(ran.count(key)) << key;
    EXPECT_EQ(row, ran.at(key)) << key;
    if (row.at("kind") == "routing") flips += std::stoul(row.at("routing_flips"));
  }
  EXPECT_GT(flips, 0u) << "the case must have router or indexer flips for the agreement to cover them";

  const CliResult cmp = run(fmt::format("compare '{}' '{}' --group-a /reference --group-b /runs/r1 --stages 'L0[2-4].attn.*' -o '{}'",
                                        c, c, path("cmp")));
  ASSERT_LE(cmp.code, 1) << cmp.out << cmp.err;
  const auto compared = csv_rows(path("cmp/report.csv"));
  ASSERT_GT(compared.size(), 10u);
  for (const auto& [key, row] : compared) {
    EXPECT_EQ(key.rfind("L02.attn.", 0) == 0 || key.rfind("L03.attn.", 0) == 0, true) << key;
    ASSERT_TRUE(ran.count(key)) << key;
    for (const char* col : {"cosine", "max_abs", "rmse", "rel_l2"}) EXPECT_EQ(row.at(col), ran.at(key).at(col)) << key << " " << col;
  }
  EXPECT_NE(run(fmt::format("info '{}'", c)).out.find("r1"), std::string::npos);

  // A run under a policy file that has since gone: compared by the scaled rule, with a note.
  std::ofstream(path("gone.toml")) << "preset = \"fixed\"\n";
  ASSERT_LE(run(fmt::format("run '{}' --policy '{}' --save --run-id r3 --no-reports", c, path("gone.toml"))).code, 1);
  std::filesystem::remove(path("gone.toml"));
  const CliResult gone = run(fmt::format("compare '{}' '{}' --group-b /runs/r3 --no-reports", c, c));
  EXPECT_LE(gone.code, 1) << gone.out << gone.err;
  EXPECT_NE(gone.out.find("the run's policy cannot be rebuilt"), std::string::npos) << gone.out;

  // Into a file of the user's, only the compared stages; never over the case itself.
  const CliResult to = run(fmt::format("run '{}' --no-reports --stages lm_head --save-to '{}' --run-id r2", c, path("s.h5")));
  ASSERT_LE(to.code, 1) << to.err;
  const CliResult cmp2 = run(fmt::format("compare '{}' '{}' --group-b /runs/r2 --no-reports", c, path("s.h5")));
  EXPECT_LE(cmp2.code, 1) << cmp2.out << cmp2.err;
  // Judged as the run was: its --stages, so no tensor is on one side only.
  EXPECT_NE(cmp2.out.find("stages      the run's --stages 'lm_head'"), std::string::npos) << cmp2.out;
  EXPECT_NE(cmp2.out.find(" of 1 tensors\n"), std::string::npos) << cmp2.out;
  const CliResult self = run(fmt::format("run '{}' --no-reports --save-to '{}'", c, c));
  EXPECT_EQ(self.code, 2);
  EXPECT_NE(self.err.find("that is the case file"), std::string::npos) << self.err;
}

// The terminal summary prints the logits' KL (mean, p99, max), top-1 and top-10 as report.csv has them.
TEST_F(CliHygiene, TerminalSummaryPrintsLogitsAgreement) {
  const CliResult r = run(fmt::format("run '{}' --policy naive -o '{}'", path("c.h5"), path("rep")));
  ASSERT_LE(r.code, 1) << r.err;
  const auto row = csv_rows(path("rep/report.csv")).at("lm_head/logits");
  const std::string lines = fmt::format(
      "\nlogits      lm_head/logits: KL mean {:.3g}, p99 {:.3g}, max {:.3g}\n"
      "            top-1 agreement {:.2f}% of 88 real tokens (8 padding tokens left out), top-10 overlap {:.2f}%\n",
      std::stod(row.at("kl_mean")), std::stod(row.at("kl_p99")), std::stod(row.at("kl_max")),
      100 * std::stod(row.at("top1_agree")), 100 * std::stod(row.at("topk_overlap_mean")));
  EXPECT_NE(r.out.find(lines), std::string::npos) << lines << r.out;
  EXPECT_GT(std::stod(row.at("kl_max")), 0.0);
}

// Every record: OS, kernel, CPU, GPU ("none" on emu), the case file's sha256 before the run,
// the model's as `sha256sum` of its weight files hashed again, and the expanded policy; in the
// case file, report.json and report.html alike.
TEST_F(CliHygiene, EnvironmentRecordsMachineChecksumsAndExpandedPolicy) {
  const std::string c = path("c.h5");
  const std::string case_sha = file_sha256(c);
  const CliResult r = run(fmt::format("run '{}' --set 'L01.attn.*:qk_accum=fp16' --run-id e1 -o '{}'", c, path("rep")));
  ASSERT_LE(r.code, 1) << r.err;
  const std::string model_sha =
      shell_out(fmt::format("cd '{}' && LC_ALL=C sha256sum $(LC_ALL=C ls *.safetensors) | sha256sum", path("m"))).substr(0, 64);
  ASSERT_TRUE(testing::recorded_run(c, "e1"));
  const EnvRecord env = testing::recorded_run(c, "e1")->env;
  const auto json = nlohmann::json::parse(slurp(path("rep/report.json")))["env"];
  const std::string html = slurp(path("rep/report.html"));
  const std::map<std::string, std::string> expected = {
      {"case_sha256", case_sha},
      {"model_sha256", model_sha},
      {"model_files", "1"},
      {"gpu", "none"},
      {"policy_stages", "L01.attn.core: qk_accum=fp16"}};
  for (const auto& [k, v] : expected) {
    EXPECT_EQ(env.extra.at(k), v) << k;
    EXPECT_EQ(json.at(k), v) << k;
    EXPECT_NE(html.find(fmt::format("<td>{}</td>", k)), std::string::npos) << k;
  }
  EXPECT_NE(html.find(case_sha), std::string::npos);
  EXPECT_NE(env.extra.at("policy_knobs").find("storage=bf16 stream=fp32 "), std::string::npos) << env.extra.at("policy_knobs");
  EXPECT_NE(env.extra.at("policy_knobs").find(" qk_accum=fp32 "), std::string::npos);
  EXPECT_FALSE(env.os.empty() || env.os == "unknown");
  EXPECT_EQ(env.kernel.rfind("Linux ", 0), 0u) << env.kernel;
  EXPECT_GT(env.cpu_cores, 0);
  for (const char* k : {"os", "kernel", "cpu_cores", "cpu_model"}) EXPECT_TRUE(json.contains(k)) << k;

  // A global --set goes into the knob line, and a multi-line stage table shows as lines.
  ASSERT_LE(run(fmt::format("run '{}' --set storage=fp32 --set 'L0[12].attn.core:pv_accum=fp16' --run-id e2 -o '{}'", c,
                            path("rep2")))
                .code,
            1);
  const EnvRecord env2 = testing::recorded_run(c, "e2")->env;
  EXPECT_NE(env2.extra.at("policy_knobs").find("storage=fp32"), std::string::npos);
  EXPECT_EQ(env2.extra.at("policy_stages"), "L01.attn.core: pv_accum=fp16\nL02.attn.core: pv_accum=fp16");
  EXPECT_NE(slurp(path("rep2/report.html")).find("<pre>L01.attn.core: pv_accum=fp16\nL02.attn.core: pv_accum=fp16</pre>"),
            std::string::npos);
  // The golden record of the case carries the machine and checksums too.
  bool golden = false;
  for (const auto& [id, e] : read_env_records(c))
    if (id.rfind("golden", 0) == 0) golden = e.extra.count("case_sha256") && e.extra.at("model_sha256") == model_sha && !e.kernel.empty();
  EXPECT_TRUE(golden);
}

}  // namespace
}  // namespace tdiff
