// The precision audit (checks/audit.h) and `tdiff audit`: rows, factors, the run-to-run column,
// the paper's factors, knobs the candidate has no kernel for, and the report files, on a
// tiny-model case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checks/audit.h"
#include "base/error.h"
#include "emu/emu_backend.h"
#include "emu_case.h"
#include "exec/backend_registry.h"
#include "report/audit_report.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

// emu candidates, as `tdiff audit` makes them; `made` counts them.
CandidateFactory emu_candidates(int* made = nullptr) {
  return [made](const Policy& p, std::uint64_t seed) -> std::unique_ptr<Backend> {
    if (made) ++*made;
    return std::make_unique<emu::EmuBackend>(p, seed);
  };
}

// emu without an attention kernel: a port that has not written it yet.
class NoAttention : public Backend {
 public:
  NoAttention(const Policy& p, std::uint64_t seed) : emu_(p, seed) {}
  std::string name() const override { return "no-attention"; }
  std::vector<Tensor> run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) override {
    return emu_.run(s, in, ctx);
  }
  bool implements(OpKind kind) const override { return kind != OpKind::attention && emu_.implements(kind); }

 private:
  emu::EmuBackend emu_;
};

std::string printed(const AuditResult& r, const RunInfo& info) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  print_audit(f, r, info);
  std::fclose(f);
  std::string s(buf, size);
  std::free(buf);
  return s;
}

// The line of `text` that starts with "knob ".
std::string knob_line(const std::string& text, const std::string& knob) {
  const auto p = text.find("\n" + knob + " ");
  return p == std::string::npos ? "" : text.substr(p + 1, text.find('\n', p + 1) - p - 1);
}

class Audit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("tdiff-audit-{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const ModelConfig tiny = synth_preset("tiny");
    // 128 tokens: two KV blocks, CSA/HCA entries, the indexer selecting among exact ties.
    const auto c = testing::cached_golden_case("audit", [&](const fs::path& d) {
      testing::build_golden_case(d, tiny, 1, {testing::random_ids(128, tiny.vocab_size, 31)}, 128);
    });
    case_ = new testing::CachedCase(c);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete case_;
  }
  static CaseSession session() { return open_session(case_->path, case_->model); }
  // The case and its model folder, for command lines.
  static std::string args() { return case_->path + " --model " + case_->model; }
  static std::string read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static int sh(const std::string& cmd) { return WEXITSTATUS(std::system((cmd + " > /dev/null 2>&1").c_str())); }
  // Runs `cmd`; its stderr in `err`.
  static int sh_err(const std::string& cmd, std::string& err) {
    const fs::path e = *dir_ / "stderr.txt";
    const int code = WEXITSTATUS(std::system(fmt::format("{} > /dev/null 2> {}", cmd, e.string()).c_str()));
    err = read(e);
    return code;
  }
  static fs::path* dir_;
  static testing::CachedCase* case_;
};
fs::path* Audit::dir_ = nullptr;
testing::CachedCase* Audit::case_ = nullptr;

TEST_F(Audit, RowsAndFactors) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"sinkhorn", "topk_ties", "mask_style"};
  opt.full_runs = false;
  int made = 0;
  const AuditResult r = run_audit(s, Policy::preset("fixed"), emu_candidates(&made), opt);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.backend, "emu");
  EXPECT_EQ(made, 1 + 3 * 2);  // one asked what it implements, then one per knob and setting
  const AuditRow &sink = r.rows[0], &ties = r.rows[1], &mask = r.rows[2];
  EXPECT_EQ(sink.knob.name, "sinkhorn");
  EXPECT_EQ(sink.touched, 4 * 2 * 2 + 1);  // hc_mix and hc_sinkhorn at both sites of 4 layers, hc_head
  EXPECT_GT(sink.factor, 100);
  EXPECT_DOUBLE_EQ(sink.factor, sink.bad.local.rel_l2 / sink.good.local.rel_l2);
  EXPECT_FALSE(sink.bad.ran_full);
  EXPECT_TRUE(ties.selection);
  EXPECT_FALSE(sink.selection);
  EXPECT_DOUBLE_EQ(mask.factor, 1.0);  // finite inputs: identical bits (the sink keeps rows finite)
  // An unknown knob is an input error.
  opt.knobs = {"bogus"};
  EXPECT_THROW(run_audit(s, Policy::preset("fixed"), emu_candidates(), opt), InputError);
}

TEST_F(Audit, EndToEndAndRunToRun) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"reduction", "topk_ties"};
  const AuditResult r = run_audit(s, Policy::preset("fixed"), emu_candidates(), opt);
  ASSERT_EQ(r.rows.size(), 2u);
  const AuditRow &red = r.rows[0], &ties = r.rows[1];
  // Run to run: only the order-dependent settings differ between the two seeds.
  ASSERT_TRUE(red.bad.ran_full);
  EXPECT_GT(red.bad.r2r.tensors_differ, 0);
  EXPECT_FALSE(red.bad.r2r.first_differing.empty());
  EXPECT_EQ(red.good.r2r.tensors_differ, 0);
  EXPECT_EQ(red.good.r2r.selection_tokens, 0);
  EXPECT_GT(ties.bad.r2r.selection_tokens, 0);
  EXPECT_EQ(ties.good.r2r.tensors_differ, 0);
  // End to end at the logits: the good side is the base policy's run.
  ASSERT_TRUE(red.good.full.logits.logits.has_value());
  EXPECT_EQ(red.good.full.logits.metrics.rel_l2, ties.good.full.logits.metrics.rel_l2);
  EXPECT_GT(red.bad.full.logits.metrics.rel_l2, 0);
}

TEST_F(Audit, FlippedOnNaiveTheGoodSideIsTheFix) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"qk_accum"};
  opt.full_runs = false;
  const AuditResult r = run_audit(s, Policy::preset("naive"), emu_candidates(), opt);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.policy, "naive");
  EXPECT_FALSE(r.rows[0].bad.ran_full);
  EXPECT_GT(r.rows[0].factor, 1.0);
}

TEST_F(Audit, PaperFactorsBesideTheMeasuredOnes) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"qk_accum", "sinkhorn"};
  opt.full_runs = false;
  const AuditResult r = run_audit(s, Policy::preset("fixed"), emu_candidates(), opt);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].knob.paper_factor, 10);
  EXPECT_EQ(r.rows[1].knob.paper_factor, 0);  // the paper has no number for it
  // Terminal: the paper's factor in its own column, after the measured one.
  RunInfo info;
  const std::string table = printed(r, info);
  const std::string qk = knob_line(table, "qk_accum"), sink = knob_line(table, "sinkhorn");
  EXPECT_NE(qk.find(audit_factor_text(r.rows[0].factor) + "  ~10x"), std::string::npos) << table;
  EXPECT_EQ(sink.find('~'), std::string::npos) << table;
  EXPECT_NE(table.find("paper: the factor the FlashAttention-on-MI250 port"), std::string::npos) << table;
  // CSV: a paper_factor column, empty where the paper has no number.
  std::istringstream csv(render_audit_csv(r));
  std::string header, line;
  std::getline(csv, header);
  const auto column = [](const std::string& row, const std::string& header_row, const std::string& name) {
    const auto pos = header_row.find("," + name + ",");
    const auto index = std::count(header_row.begin(), header_row.begin() + static_cast<long>(pos) + 1, ',');
    std::istringstream fields(row);
    std::string f;
    for (long i = 0; i <= index; ++i) std::getline(fields, f, ',');
    return f;
  };
  ASSERT_NE(header.find(",factor,paper_factor,"), std::string::npos) << header;
  std::getline(csv, line);
  EXPECT_EQ(column(line, header, "paper_factor"), "10") << line;
  std::getline(csv, line);
  EXPECT_EQ(column(line, header, "paper_factor"), "") << line;
  // JSON: a number, or null.
  const auto j = nlohmann::json::parse(render_audit_json(r, info));
  EXPECT_EQ(j["rows"][0]["paper_factor"], 10);
  EXPECT_TRUE(j["rows"][1]["paper_factor"].is_null());
  EXPECT_EQ(j["backend"], "emu");
  // HTML: a paper column.
  const std::string html = render_audit_html(r, info);
  EXPECT_NE(html.find("<th>paper</th>"), std::string::npos);
  EXPECT_NE(html.find(">~10x</td>"), std::string::npos);
}

TEST_F(Audit, KnobsOfKindsTheCandidateLacksAreSkipped) {
  CaseSession s = session();
  AuditOptions opt;
  opt.knobs = {"qk_accum", "sinkhorn"};
  opt.full_runs = false;
  const CandidateFactory no_attention = [](const Policy& p, std::uint64_t seed) -> std::unique_ptr<Backend> {
    return std::make_unique<NoAttention>(p, seed);
  };
  const AuditResult r = run_audit(s, Policy::preset("fixed"), no_attention, opt);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].skipped, "no-attention has no kernel for attention");
  EXPECT_TRUE(r.rows[1].skipped.empty());
  EXPECT_GT(r.rows[1].factor, 100);  // the others are measured as on emu
  const std::string table = printed(r, RunInfo{});
  EXPECT_EQ(knob_line(table, "qk_accum"), "qk_accum         fp16       skipped: no-attention has no kernel for attention");
  const auto j = nlohmann::json::parse(render_audit_json(r, RunInfo{}));
  EXPECT_EQ(j["rows"][0]["skipped"], r.rows[0].skipped);
  EXPECT_FALSE(j["rows"][0].contains("bad"));
  EXPECT_NE(render_audit_csv(r).find(",no-attention has no kernel for attention,"), std::string::npos);
  // A full run needs every kind of the model.
  opt.full_runs = true;
  EXPECT_THROW(run_audit(s, Policy::preset("fixed"), no_attention, opt), InputError);
}

TEST_F(Audit, CommandPrintsTheTableAndWritesReports) {
  const std::string out = (*dir_ / "rep").string(), txt = (*dir_ / "audit.txt").string();
  ASSERT_EQ(WEXITSTATUS(std::system(fmt::format("{} audit {} --no-full-runs -o {} > {} 2>&1", TDIFF_BIN, args(), out, txt).c_str())), 0);
  const std::string table = read(txt);
  std::istringstream lines(table);
  std::string line;
  int knob_lines = 0;
  while (std::getline(lines, line)) {
    if (line.starts_with("reproduce")) break;
    EXPECT_LE(line.size(), 100u) << line;  // fits 100 columns (the reproduce command aside)
    for (const auto& k : knob_catalog())
      if (line.starts_with(k.name + " ")) ++knob_lines;
  }
  EXPECT_EQ(knob_lines, static_cast<int>(knob_catalog().size()));
  EXPECT_NE(table.find(fmt::format("tdiff audit {}: emu, seeds ", fs::path(case_->path).filename().string())),
            std::string::npos) << table;
  EXPECT_NE(knob_line(table, "pv_accum").find(" ~8x"), std::string::npos) << table;
  // Progress in a log (stderr is no terminal here): a line per knob, before the table.
  const std::string first = fmt::format("audit: [1/{}] {}: ", knob_catalog().size(), knob_catalog().front().name);
  const auto progress = table.find(first), table_start = table.find("\n" + knob_catalog().front().name + " ");
  ASSERT_NE(progress, std::string::npos) << table;
  EXPECT_LT(progress, table_start) << table;
  // CSV: a header and one row per knob.
  const std::string csv = read(fs::path(out) / "audit.csv");
  EXPECT_TRUE(csv.starts_with("knob,bad,good,touched_stages,selection,local_bad,local_good"));
  EXPECT_NE(csv.find("\nsoftmax_stats,"), std::string::npos);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(knob_catalog().size()) + 1);
  // JSON: every row with its per-stage details.
  const auto j = nlohmann::json::parse(read(fs::path(out) / "audit.json"));
  ASSERT_EQ(j["rows"].size(), knob_catalog().size());
  EXPECT_EQ(j["policy"], "fixed");
  EXPECT_EQ(j["backend"], "emu");
  EXPECT_EQ(j["env"]["backend"], "emu");
  EXPECT_FALSE(j["rows"][0]["bad"]["stages"].empty());
  // HTML: self-contained, one details block per knob.
  const std::string html = read(fs::path(out) / "audit.html");
  EXPECT_NE(html.find("<table id=\"audit\""), std::string::npos);
  std::size_t details = 0;
  for (auto p = html.find("<details"); p != std::string::npos; p = html.find("<details", p + 1)) ++details;
  EXPECT_EQ(details, knob_catalog().size());
  EXPECT_EQ(html.find("http"), std::string::npos);  // loads nothing from anywhere
}

TEST_F(Audit, BadArgumentsExitWith2) {
  EXPECT_EQ(sh(fmt::format("{} audit {} --knob bogus --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {} --set bogus=1 --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {} --seed 3 --seed-b 3 --no-reports", TDIFF_BIN, args())), 2);
  EXPECT_EQ(sh(fmt::format("{} audit {}/missing.h5 --no-reports", TDIFF_BIN, dir_->string())), 2);
  // --hip-gemm is hip's.
  EXPECT_EQ(sh(fmt::format("{} audit {} --hip-gemm vector --no-full-runs --knob qk_accum --no-reports", TDIFF_BIN, args())), 2);
}

TEST_F(Audit, HipOnABuildWithoutItExitsWith2) {
  for (const auto& e : backend_registry())
    if (e.name == "hip" && e.built) GTEST_SKIP() << "this tdiff has hip";
  std::string err;
  EXPECT_EQ(sh_err(fmt::format("{} audit {} --backend hip --hip-gemm vector --no-reports", TDIFF_BIN, args()), err), 2);
  // One line naming the backend and how to build it (backend_entry's message).
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("backend 'hip' is not built into this tdiff (configure with -DTDIFF_HIP="), std::string::npos) << err;
}

}  // namespace
}  // namespace tdiff
