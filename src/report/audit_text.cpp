// The audit table on the terminal, audit.csv and audit.json.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/version.h"
#include "report/audit_report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::csv_field;

nlohmann::json number(double v) {
  if (std::isfinite(v)) return v;
  return report::num(v);  // JSON has no NaN/inf: kept as text
}

std::string top1_text(const AuditSide& s) {
  if (!s.ran_full || !s.full.logits.logits) return "-";
  const double p = 100 * s.full.logits.logits->top1_agree;
  return p >= 99.95 && p < 100 ? "99.9" : fmt::format("{:.3g}", p);
}

std::string r2r_text(const AuditSide& s) {
  return s.ran_full ? fmt::format("{}/{}", s.r2r.tensors_differ, s.r2r.selection_tokens) : "-";
}

double logits_rel_l2(const AuditSide& s) { return s.ran_full ? s.full.logits.metrics.rel_l2 : NAN; }

// A table line without the padding of empty cells at its end (a knob the paper has no number for).
void print_row(std::FILE* out, std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  fmt::print(out, "{}\n", line);
}

}  // namespace

std::string audit_local_text(const AuditSide& side, bool selection) {
  if (selection) return fmt::format("{} tok", side.local.selection_tokens);
  if (side.local.nonfinite > 0) return "NaN/Inf";
  return fmt::format("{:.2e}", side.local.rel_l2);
}

std::string audit_factor_text(double f) {
  if (std::isinf(f)) return "inf";
  if (std::isnan(f)) return "-";
  return f >= 100 ? fmt::format("{:.0f}x", f) : f >= 10 ? fmt::format("{:.1f}x", f) : fmt::format("{:.2f}x", f);
}

std::string audit_paper_text(const KnobInfo& knob) {
  return knob.paper_factor > 0 ? fmt::format("~{}x", knob.paper_factor) : "";
}

bool audit_ran_full(const AuditResult& r) {
  for (const auto& row : r.rows)
    if (row.bad.ran_full || row.good.ran_full) return true;
  return false;
}

void print_audit(std::FILE* out, const AuditResult& r, const RunInfo& info) {
  // Without full runs (--no-full-runs) the end-to-end and run-to-run columns have nothing to show.
  const bool full = audit_ran_full(r);
  const int width = full ? 99 : 59;
  fmt::print(out, "{}\n", info.title);
  fmt::print(out, "knobs flipped on: {}\n\n", r.policy);
  print_row(out, fmt::format("{:<16} {:<10} {:<31}{}", "", "", "local error (isolated)",
                             full ? fmt::format(" {:<17} {:<9} {}", "logits rel_l2", "top-1 %", "run to run") : ""));
  fmt::print(out, "{:<16} {:<10} {:>8} {:>8} {:>7} {:>5}{}\n", "knob", "bad", "bad", "good", "factor", "paper",
             full ? fmt::format(" {:>8} {:>8} {:>9} {:>11}", "bad", "good", "bad/good", "bad|good") : "");
  fmt::print(out, "{}\n", std::string(width, '-'));
  for (const auto& row : r.rows) {
    const std::string bad = row.knob.bad.size() > 10 ? row.knob.bad.substr(0, 9) + "~" : row.knob.bad;
    if (!row.skipped.empty()) {
      fmt::print(out, "{:<16} {:<10} skipped: {}\n", row.knob.name, bad, row.skipped);
      continue;
    }
    print_row(out, fmt::format("{:<16} {:<10} {:>8} {:>8} {:>7} {:>5}{}", row.knob.name, bad,
                               audit_local_text(row.bad, row.selection), audit_local_text(row.good, row.selection),
                               audit_factor_text(row.factor), audit_paper_text(row.knob),
                               !full ? ""
                                     : fmt::format(" {:>8} {:>8} {:>9} {:>11}",
                                                   report::num(logits_rel_l2(row.bad), "{:.2e}"),
                                                   report::num(logits_rel_l2(row.good), "{:.2e}"),
                                                   top1_text(row.bad) + "/" + top1_text(row.good),
                                                   r2r_text(row.bad) + "|" + r2r_text(row.good))));
  }
  fmt::print(out, "{}\n", std::string(width, '-'));
  fmt::print(out,
             "local: relative L2 error of the stages the knob touches, each run on the reference's own inputs\n"
             "  (top-k knobs: tokens whose selection differs from the reference); factor = bad / good.\n"
             "paper: the factor the FlashAttention-on-MI250 port the method came from measured.\n");
  if (full)
    fmt::print(out,
               "logits, top-1: full candidate runs against the reference. run to run: stage outputs not\n"
               "  bit-identical / tokens with another selection, between two run seeds.\n");
  else
    fmt::print(out, "no full runs (--no-full-runs): no end-to-end or run-to-run columns.\n");
  fmt::print(out, "{:.1f} s.\n", r.seconds);
  if (!info.command.empty()) fmt::print(out, "reproduce   {}\n", info.command);
}

std::string render_audit_csv(const AuditResult& r) {
  std::string o =
      "knob,bad,good,touched_stages,selection,local_bad,local_good,nonfinite_bad,nonfinite_good,factor,paper_factor,"
      "logits_rel_l2_bad,logits_rel_l2_good,logits_cosine_bad,logits_cosine_good,top1_bad,top1_good,"
      "r2r_tensors_bad,r2r_tokens_bad,r2r_tensors_good,r2r_tokens_good,skipped,effect\n";
  auto full = [](double v) { return report::num(v, "{}"); };
  for (const auto& row : r.rows) {
    const bool measured = row.skipped.empty();
    auto local = [&](const AuditSide& s) -> std::string {
      if (!measured) return "";
      return row.selection ? std::to_string(s.local.selection_tokens) : full(s.local.rel_l2);
    };
    auto nonfinite = [&](const AuditSide& s) { return measured ? std::to_string(s.local.nonfinite) : ""; };
    const std::string paper = row.knob.paper_factor > 0 ? full(row.knob.paper_factor) : "";
    auto e2e = [&](const AuditSide& s, int what) -> std::string {
      if (!s.ran_full) return "";
      if (what == 0) return full(s.full.logits.metrics.rel_l2);
      if (what == 1) return full(s.full.logits.metrics.cosine);
      return s.full.logits.logits ? full(s.full.logits.logits->top1_agree) : "";
    };
    auto r2r = [&](const AuditSide& s, bool tokens) -> std::string {
      if (!s.ran_full) return "";
      return std::to_string(tokens ? s.r2r.selection_tokens : s.r2r.tensors_differ);
    };
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", row.knob.name,
                     row.knob.bad, row.knob.good, row.touched, row.selection ? 1 : 0, local(row.bad), local(row.good),
                     nonfinite(row.bad), nonfinite(row.good), measured ? full(row.factor) : "", paper,
                     e2e(row.bad, 0), e2e(row.good, 0), e2e(row.bad, 1), e2e(row.good, 1), e2e(row.bad, 2),
                     e2e(row.good, 2), r2r(row.bad, false), r2r(row.bad, true), r2r(row.good, false),
                     r2r(row.good, true), csv_field(row.skipped), csv_field(row.knob.effect));
  }
  return o;
}

std::string render_audit_json(const AuditResult& r, const RunInfo& info) {
  using nlohmann::json;
  json rows = json::array();
  for (const auto& row : r.rows) {
    auto side = [&](const AuditSide& s) {
      json stages = json::array();
      for (const auto& d : s.local.rows) {
        json t = {{"stage", d.stage}, {"tensor", d.tensor}};
        if (d.routing) {
          t["tokens_differ"] = d.routing->tokens - d.routing->equal_tokens;
          t["flips"] = d.routing->flips;
          t["tie_tokens"] = d.routing->tie_tokens;
        } else {
          t["rel_l2"] = number(d.metrics.rel_l2);
          t["cosine"] = number(d.metrics.cosine);
          t["max_abs"] = number(d.metrics.max_abs);
          t["max_abs_scaled"] = number(d.metrics.max_abs_scaled);
          t["new_nonfinite"] = d.metrics.new_nonfinite;
        }
        stages.push_back(std::move(t));
      }
      json j = {{"setting", s.setting},
                {"local", {{"rel_l2", number(s.local.rel_l2)}, {"nonfinite", s.local.nonfinite},
                           {"selection_tokens", s.local.selection_tokens}, {"selection_flips", s.local.selection_flips}}},
                {"stages", std::move(stages)}};
      if (s.ran_full) {
        const auto& m = s.full.logits.metrics;
        j["logits"] = {{"rel_l2", number(m.rel_l2)}, {"cosine", number(m.cosine)}, {"max_abs", number(m.max_abs)},
                       {"max_abs_scaled", number(m.max_abs_scaled)}};
        if (s.full.logits.logits) {
          j["logits"]["top1_agree"] = number(s.full.logits.logits->top1_agree);
          j["logits"]["kl_mean"] = number(s.full.logits.logits->kl_mean);
        }
        j["run_to_run"] = {{"tensors_differ", s.r2r.tensors_differ}, {"tensors", s.r2r.tensors},
                           {"selection_tokens", s.r2r.selection_tokens}, {"first_differing", s.r2r.first_differing}};
      }
      return j;
    };
    json kinds = json::array();
    for (auto k : row.knob.kinds) kinds.push_back(op_kind_name(k));
    json j = {{"knob", row.knob.name}, {"effect", row.knob.effect}, {"kinds", kinds}, {"touched_stages", row.touched},
              {"selection", row.selection},
              {"paper_factor", row.knob.paper_factor > 0 ? json(row.knob.paper_factor) : json(nullptr)}};
    if (!row.skipped.empty()) {
      j["skipped"] = row.skipped;
    } else {
      j["factor"] = number(row.factor);
      j["bad"] = side(row.bad);
      j["good"] = side(row.good);
    }
    rows.push_back(std::move(j));
  }
  json j = {{"tdiff_version", TDIFF_VERSION}, {"case", info.case_name}, {"run_id", info.run_id},
            {"command", info.command}, {"backend", r.backend}, {"policy", r.policy}, {"seconds", r.seconds}, {"rows", std::move(rows)}};
  json env = json::object();
  for (const auto& [k, v] : info.env) env[k] = v;
  j["env"] = std::move(env);
  return j.dump(2) + "\n";
}

std::vector<std::string> write_audit_reports(const std::string& dir, const AuditResult& r, const RunInfo& info) {
  return write_report_files(dir, {
                                     {"audit.csv", render_audit_csv(r)},
                                     {"audit.json", render_audit_json(r, info)},
                                     {"audit.html", render_audit_html(r, info)},
                                 });
}

}  // namespace tdiff
