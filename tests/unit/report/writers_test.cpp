// report.csv, report.json, junit.xml, the terminal table and atomic writes.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diff/compare.h"
#include "report/bisect_report.h"
#include "report/report.h"

namespace tdiff {
namespace {

Tensor ramp(Shape shape, double noise) {
  Tensor t(DType::f64, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = std::cos(0.3 * static_cast<double>(i)) + 0.1 + noise * std::sin(7.0 * i);
  return t;
}

// A judged run with a PASS, a WARN, a FAIL with a new NaN, logits and a missing tensor.
CompareResult sample_run() {
  Tensor nan_cand = ramp({3, 5}, 0.0);
  nan_cand.data<double>()[4] = std::numeric_limits<double>::quiet_NaN();
  NamedTensors ref = {{"embed/e", ramp({3, 5}, 0)},
                   {"L00.attn.core/o", ramp({3, 5}, 0)},
                   {"L01.attn.core/o", ramp({3, 5}, 0)},
                   {"lm_head/logits", ramp({1, 4, 40}, 0)},
                   {"L01.gone/x", ramp({2}, 0)}};
  NamedTensors cand = {{"embed/e", ramp({3, 5}, 1e-5)},
                    {"L00.attn.core/o", ramp({3, 5}, 0.02)},
                    {"L01.attn.core/o", nan_cand},
                    {"lm_head/logits", ramp({1, 4, 40}, 0.3)}};
  CompareResult r = compare_maps(ref, cand);
  judge(r, ThresholdPolicy{});
  return r;
}

RunInfo sample_info() {
  RunInfo info;
  info.case_name = "tiny";
  info.run_id = "run-1";
  info.command = "tdiff compare a.h5 b.h5 --stages 'L0*'";
  info.env = {{"tdiff_version", "0.1.0"}, {"hostname", "box <1>"}};
  return info;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

TEST(ReportCsv, StableHeaderOneRowPerTensorAndMissingRows) {
  const auto lines = lines_of(render_csv(sample_run()));
  ASSERT_EQ(lines.size(), 1u + 4u + 1u);
  EXPECT_EQ(lines[0].rfind("stage,tensor,cosine,max_abs,rmse,rel_l2,verdict,max_abs_scaled,", 0), 0u);
  const auto columns = std::count(lines[0].begin(), lines[0].end(), ',');
  EXPECT_EQ(lines[1].rfind("embed,e,", 0), 0u);
  EXPECT_NE(lines[3].find(",FAIL,"), std::string::npos);
  EXPECT_NE(lines[3].find("\"[3,5]\""), std::string::npos);  // the shape's commas are quoted
  EXPECT_EQ(lines[5].rfind("L01.gone,x,,,,,MISSING,", 0), 0u);
  EXPECT_EQ(std::count(lines[5].begin(), lines[5].end(), ','), columns);
}

TEST(ReportJson, ParsesAndKeepsNonFiniteValuesAsText) {
  const auto j = nlohmann::json::parse(render_json(sample_run(), sample_info()));
  EXPECT_EQ(j["verdict"], "FAIL");
  EXPECT_EQ(j["first_fail"], "L01.attn.core/o");
  EXPECT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["only_ref"][0], "L01.gone/x");
  EXPECT_EQ(j["rows"][2]["metrics"]["new_nonfinite"], 1);
  EXPECT_TRUE(j["rows"][3].contains("logits"));
  EXPECT_EQ(j["rows"][3]["logits"]["worst_tokens"].size(), 4u);
  EXPECT_EQ(j["command"], "tdiff compare a.h5 b.h5 --stages 'L0*'");
  EXPECT_EQ(j["thresholds"]["rel_l2_fail"], "inf");
  EXPECT_EQ(j["thresholds"]["max_abs_scaled"], 1.0);
  const auto& m = j["rows"][1]["metrics"];  // values below |r| = 1.1: scaled at most max_abs
  EXPECT_GT(m["max_abs_scaled"].get<double>(), 0.0);
  EXPECT_LE(m["max_abs_scaled"].get<double>(), m["max_abs"].get<double>());
  EXPECT_GE(m["argmax_abs_scaled"].get<std::int64_t>(), 0);
}

// Integer selections get agreement metrics only: no cosine or max-abs over expert ids; float
// rows carry the expected error and where their largest error is.
TEST(ReportCsvJson, SelectionsKeepCountsOnlyAndFloatsTheirLargestError) {
  Tensor idx(DType::i64, {4, 2}), idx_c(DType::i64, {4, 2});
  for (std::int64_t i = 0; i < 8; ++i) idx.data<std::int64_t>()[i] = idx_c.data<std::int64_t>()[i] = i % 3;
  idx_c.data<std::int64_t>()[5] = 7;
  CompareResult r = compare_maps({{"L02.moe.select/idx", idx}, {"L02.attn_norm/h", ramp({2, 2, 4}, 0)}},
                                 {{"L02.moe.select/idx", idx_c}, {"L02.attn_norm/h", ramp({2, 2, 4}, 0.01)}});
  ExpectedError e;
  e.rel = 1e-3, e.elem = 4e-3, e.format = "bf16";
  for (auto& row : r.rows)
    if (row.kind == TensorKind::values) row.expected = e;
  judge(r, ThresholdPolicy{});
  const auto j = nlohmann::json::parse(render_json(r, sample_info()));
  for (const auto& row : j["rows"]) {
    if (row["stage"] == "L02.moe.select") {
      EXPECT_FALSE(row["metrics"].contains("cosine")) << row.dump();
      EXPECT_FALSE(row["metrics"].contains("max_abs")) << row.dump();
      EXPECT_FALSE(row["metrics"].contains("argmax_abs")) << row.dump();
      EXPECT_EQ(row["metrics"]["n_diff"], 1);
      EXPECT_FALSE(row.contains("expected"));
      EXPECT_FALSE(row.contains("largest_error")) << row.dump();
      // Token 2 took expert 7: the token, not a slot (no case here: plain dimensions).
      EXPECT_EQ(row["location"]["what"], "other selection") << row.dump();
      EXPECT_EQ(row["location"]["at"], (nlohmann::json{{"dim0", 2}})) << row.dump();
    } else {
      EXPECT_DOUBLE_EQ(row["expected"]["rel"].get<double>(), 1e-3);
      EXPECT_GT(row["expected"]["ratio"].get<double>(), 1.0);
      EXPECT_TRUE(row["largest_error"]["at"].contains("dim2")) << row.dump();
      EXPECT_EQ(row["location"]["what"], "largest error") << row.dump();
      EXPECT_EQ(row["location"]["at"], row["largest_error"]["at"]) << row.dump();
    }
  }
  const auto lines = lines_of(render_csv(r));
  ASSERT_EQ(lines.size(), 3u);
  const std::string& sel = lines[1].starts_with("L02.moe.select") ? lines[1] : lines[2];
  EXPECT_EQ(sel.rfind("L02.moe.select,idx,,,,,", 0), 0u) << sel;  // no cosine, max_abs, rmse, rel_l2
  EXPECT_NE(lines[0].find(",expected,expected_elem,expected_ratio,expected_format,err_at,err_kind,"), std::string::npos);
}

TEST(ReportJunit, OneTestcasePerStage) {
  const std::string x = render_junit(sample_run(), sample_info());
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto p = x.find(what); p != std::string::npos; p = x.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<testcase "), 5u);  // 4 stages + 1 missing tensor (skipped)
  EXPECT_EQ(count("<failure "), 2u);   // the NaN stage and the logits
  EXPECT_EQ(count("<skipped "), 1u);
  EXPECT_NE(x.find("failures=\"2\""), std::string::npos);
  EXPECT_NE(x.find("box &lt;1&gt;"), std::string::npos);  // escaped
  EXPECT_NE(x.find("&apos;L0*&apos;"), std::string::npos);
}

std::string terminal_text(const CompareResult& r, TerminalOptions opt) {
  std::FILE* f = std::tmpfile();
  print_terminal(f, r, sample_info(), opt);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  std::fclose(f);
  return s;
}

TEST(ReportTerminal, FitsHundredColumnsAndColoursOnlyWhenAsked) {
  const CompareResult r = sample_run();
  const std::string plain = terminal_text(r, {});
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  EXPECT_NE(plain.find("-- L01 "), std::string::npos);
  EXPECT_NE(plain.find("<- first FAIL"), std::string::npos);
  EXPECT_NE(plain.find("only in the reference: L01.gone/x"), std::string::npos);
  // Every table line (the footer's file names may be longer) fits 100 columns.
  for (const auto& l : lines_of(plain))
    if (l.rfind("reproduce", 0) != 0) {
      EXPECT_LE(l.size(), 100u) << l;
    }
  EXPECT_NE(terminal_text(r, {.color = true}).find("\033[1;31mFAIL"), std::string::npos);
}

TEST(ReportTerminal, LargeRunsFoldPassingRows) {
  NamedTensors ref, cand;
  for (int l = 0; l < 12; ++l)
    for (const char* s : {"attn.q", "attn.k", "attn.v", "moe.out", "hc.post", "norm"}) {
      const std::string key = fmt::format("L{:02d}.{}/x", l, s);
      ref[key] = ramp({8}, 0);
      cand[key] = ramp({8}, l == 7 && std::string(s) == "norm" ? 0.5 : 1e-6);
    }
  CompareResult r = compare_maps(ref, cand);
  judge(r, ThresholdPolicy{});
  const std::string text = terminal_text(r, {});
  EXPECT_NE(text.find("L07.norm"), std::string::npos);
  EXPECT_NE(text.find("more PASS in L03"), std::string::npos);
  EXPECT_NE(text.find("PASS rows folded"), std::string::npos);
  EXPECT_NE(terminal_text(r, {.all_rows = true}).find("L03.attn.q"), std::string::npos);
}

TEST(ReportFiles, WrittenAtomicallyIntoTheFolder) {
  const auto dir = std::filesystem::temp_directory_path() / ("tdiff_rep_" + std::to_string(::getpid())) / "a" / "b";
  const auto paths = write_reports(dir.string(), sample_run(), sample_info());
  EXPECT_EQ(paths.size(), 4u);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos);
  }
  EXPECT_EQ(files, 4u);
  write_file_atomic((dir / "report.csv").string(), "replaced\n");
  std::ifstream f(dir / "report.csv");
  std::string first;
  std::getline(f, first);
  EXPECT_EQ(first, "replaced");
  EXPECT_EQ(report_dir(sample_info(), ""), "reports/tiny/run-1");
  EXPECT_EQ(report_dir(sample_info(), "x/y"), "x/y");
  std::filesystem::remove_all(dir.parent_path().parent_path());
}

}  // namespace
}  // namespace tdiff

namespace tdiff {
namespace {

BisectReport story_report(const std::string& run_first_fail, std::size_t run_index, bool culprit) {
  BisectReport r;
  r.watch.stage = "lm_head";
  r.watch.tensor = "logits";
  r.search.emplace();
  if (culprit) r.search->culprits.push_back({40, "L01.attn.core", "attn.core", 7, 8});
  r.run_first_fail = run_first_fail;
  r.run_first_fail_index = run_index;
  return r;
}

// `run`'s first divergence and `bisect`'s first culprit: one story told from both sides.
TEST(BisectStory, SaysWhyTheRunsFirstFailAndTheCulpritDiffer) {
  EXPECT_TRUE(divergence_story(story_report("L01.attn.core/o", 40, true)).empty()) << "they agree: nothing to explain";
  EXPECT_TRUE(divergence_story(story_report("", 0, true)).empty()) << "no FAIL in the run";

  const auto earlier = divergence_story(story_report("L00.moe.select/idx", 12, true));
  ASSERT_EQ(earlier.size(), 2u);
  EXPECT_NE(earlier[0].find("L00.moe.select/idx the first divergence"), std::string::npos) << earlier[0];
  EXPECT_NE(earlier[1].find("L00.moe.select comes first, yet with every stage before L01.attn.core"), std::string::npos)
      << earlier[1];

  const auto later = divergence_story(story_report("lm_head/logits", 152, true));
  ASSERT_EQ(later.size(), 2u);
  EXPECT_NE(later[1].find("L01.attn.core comes first: its own output is within its thresholds"), std::string::npos)
      << later[1];

  const auto none = divergence_story(story_report("L00.moe.select/idx", 12, false));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("no split moves lm_head/logits beyond the gate"), std::string::npos) << none[0];
}

}  // namespace
}  // namespace tdiff
