// The precision audit (checks/audit.h) on a tiny-model case: rows, factors, the run-to-run
// column, the paper's factors, and knobs the candidate has no kernel for.
#include <gtest/gtest.h>

#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checks/audit.h"
#include "base/error.h"
#include "emu/emu_backend.h"
#include "audit_case.h"
#include "report/audit_report.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using Audit = testing::AuditCase;
using testing::knob_line;

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

}  // namespace
}  // namespace tdiff
