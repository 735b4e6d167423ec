// The terminal table: grouped by layer, fits 100 columns, colours only on a terminal.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "report/report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

constexpr int kStageW = 22, kTensorW = 8;  // the longest stage name: L42.attn.idx.weights

std::string fit(const std::string& s, std::size_t w) {
  if (s.size() <= w) return s;
  return s.substr(0, w - 1) + "~";  // ASCII, so that the width stays exact everywhere
}

const char* colour_of(Verdict v) {
  switch (v) {
    case Verdict::pass: return "\033[32m";
    case Verdict::warn: return "\033[33m";
    case Verdict::fail: return "\033[1;31m";
  }
  return "";
}

class Printer {
 public:
  Printer(std::FILE* out, const CompareResult& r, const TerminalOptions& opt) : out_(out), r_(r), opt_(opt) {}

  std::string verdict(Verdict v) const {
    const std::string name = verdict_name(v);
    return opt_.color ? colour_of(v) + name + "\033[0m" : name;
  }
  std::string bold(const std::string& s) const { return opt_.color ? "\033[1m" + s + "\033[0m" : s; }

  void rule(const std::string& title) {
    const std::string head = "-- " + title + " ";
    fmt::print(out_, "{}{}\n", head, std::string(std::max<int>(0, opt_.width - 2 - static_cast<int>(head.size())), '-'));
  }

  void row(const TensorDiff& d, const char* mark, const std::string& note) {
    const TensorMetrics& m = d.metrics;
    std::string numbers;
    if (d.kind == TensorKind::routing) {
      const RoutingMetrics& rt = *d.routing;
      numbers = fmt::format("{:>9} {:>35}", "exact",
                            fmt::format("{}/{} tokens differ, {} flips", rt.tokens - rt.equal_tokens, rt.tokens, rt.flips));
    } else if (d.kind == TensorKind::exact) {
      numbers = fmt::format("{:>9} {:>35}", "exact", fmt::format("{}/{} elements differ", m.n_diff, m.count));
    } else {
      numbers = fmt::format("{:>9} {:>9} {:>9} {:>9} {:>5}", report::cosine_text(m.cosine),
                            report::num(m.max_abs, "{:.2e}"), report::num(m.rel_l2, "{:.2e}"), report::expected_text(d),
                            report::ratio_text(d));
    }
    const std::string left = fmt::format("{:2}{:<{}} {:<{}} {}  ", mark, fit(d.stage, kStageW), kStageW,
                                         fit(d.tensor, kTensorW), kTensorW, numbers);
    const std::string line = left + verdict(d.verdict) + (note.empty() ? "" : "  " + note);
    fmt::print(out_, "{}\n", first_ ? bold(line) : line);
    // The reason on its own line: the table stays narrow and the reason is never cut.
    if (d.verdict != Verdict::pass && !d.reason.empty())
      fmt::print(out_, "{:6}{}\n", "", fit(d.reason, static_cast<std::size_t>(opt_.width - 6)));
    if (const std::string w = report::where_text(r_, d); d.verdict != Verdict::pass && !w.empty())
      fmt::print(out_, "{:6}{}\n", "", fit(w, static_cast<std::size_t>(opt_.width - 6)));
  }
  void set_first(bool f) { first_ = f; }

  void collapsed(int n, const std::string& group, double cos, double max_abs) {
    fmt::print(out_, "  {:<{}} ({} more PASS in {}; lowest cosine {}, highest max_abs {})\n", "", 0, n, group,
               report::cosine_text(cos), report::num(max_abs, "{:.2e}"));
  }

 private:
  std::FILE* out_;
  const CompareResult& r_;
  TerminalOptions opt_;
  bool first_ = false;
};

}  // namespace

bool want_color(std::FILE* out) {
  const char* no = std::getenv("NO_COLOR");
  return isatty(fileno(out)) && !(no && *no);
}

void print_terminal(std::FILE* out, const CompareResult& r, const RunInfo& info, const TerminalOptions& opt) {
  Printer p(out, r, opt);
  fmt::print(out, "reference {}\ncandidate {}\n\n", r.label_ref, r.label_cand);
  // rel_l2 beside the error the candidate's formats explain (expected) and their ratio (x).
  fmt::print(out, "  {:<{}} {:<{}} {:>9} {:>9} {:>9} {:>9} {:>5}  verdict\n", "stage", kStageW, "tensor", kTensorW,
             "cosine", "max_abs", "rel_l2", "expected", "x");

  const auto worst = report::worst_rows(r, 3);
  const bool full = opt.all_rows || static_cast<int>(r.rows.size()) <= opt.max_rows;
  bool layered = false;
  for (const auto& d : r.rows) layered |= stage_layer(d.stage) >= 0;

  std::string group;
  int hidden = 0, folded = 0;
  double hidden_cos = 1.0, hidden_max = 0.0;
  auto flush_hidden = [&] {
    if (hidden) p.collapsed(hidden, group, hidden_cos, hidden_max);
    hidden = 0, hidden_cos = 1.0, hidden_max = 0.0;
  };
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const TensorDiff& d = r.rows[i];
    const std::string g = report::group_name(d.stage);
    if (layered && g != group) {
      flush_hidden();
      group = g;
      p.rule(g);
    }
    const bool first = static_cast<int>(i) == r.first_fail;
    const bool is_worst = std::find(worst.begin(), worst.end(), i) != worst.end();
    if (!full && d.verdict == Verdict::pass && !is_worst) {
      ++hidden, ++folded;
      if (d.kind == TensorKind::values || d.kind == TensorKind::logits) {
        hidden_cos = std::min(hidden_cos, d.metrics.cosine);
        hidden_max = std::max(hidden_max, d.metrics.max_abs);
      }
      continue;
    }
    p.set_first(first);
    p.row(d, first ? "> " : is_worst ? "* " : "", first ? "<- first FAIL" : "");
  }
  flush_hidden();

  // The verdict word coloured, the rest as verdict_line words it; the one-sided counts on a
  // line of their own, to stay within 100 columns.
  const std::string line = report::verdict_line(r), name = verdict_name(r.verdict);
  const std::size_t one_sided = line.find("; ");
  fmt::print(out, "\nverdict {}{}\n", p.verdict(r.verdict), line.substr(name.size(), one_sided - name.size()));
  if (one_sided != std::string::npos) fmt::print(out, "{:12}{}\n", "", line.substr(one_sided + 2));
  for (const auto& d : r.rows) {
    if (d.logits)
      fmt::print(out, "logits      {}: KL mean {}, p99 {}, max {}\n{:12}top-1 agreement {:.2f}% of {} {}tokens{}, top-10 overlap {:.2f}%{}\n",
                 d.key(),
                 report::num(d.logits->kl_mean), report::num(d.logits->kl_p99), report::num(d.logits->kl_max), "",
                 100 * d.logits->top1_agree, d.logits->tokens, r.padding_tokens ? "real " : "",
                 report::padding_note(r), 100 * d.logits->topk_overlap_mean,
                 d.logits->nonfinite_tokens ? fmt::format(" ({} tokens with NaN/Inf left out)", d.logits->nonfinite_tokens) : "");
    if (d.tokens) fmt::print(out, "tokens      {}\n", token_summary(*d.tokens));
  }
  if (const std::string note = report::step_note(r); !note.empty()) fmt::print(out, "steps       {}\n", note);
  if (const std::string note = report::p_vs_d_note(r); !note.empty()) fmt::print(out, "p_vs_d      {}\n", note);
  if (const std::string note = report::divergence_note(r); !note.empty()) fmt::print(out, "diverged    {}\n", note);
  if (r.first_fail >= 0) {
    const TensorDiff& f = r.rows[static_cast<std::size_t>(r.first_fail)];
    fmt::print(out, "first FAIL  {} ({})\n", p.bold(f.key()), f.reason);
  }
  for (std::size_t k = 0; k < worst.size(); ++k)
    fmt::print(out, "{:12}{} ({})\n", k == 0 ? "worst (*)" : "", r.rows[worst[k]].key(),
               report::error_text(r.rows[worst[k]]));
  auto list = [&](const std::vector<std::string>& keys, const char* label) {
    if (keys.empty()) return;
    std::vector<std::string> shown(keys.begin(), keys.begin() + static_cast<long>(std::min<std::size_t>(keys.size(), 6)));
    fmt::print(out, "{} {}{}\n", label, fmt::join(shown, ", "),
               keys.size() > shown.size() ? fmt::format(" (+{} more)", keys.size() - shown.size()) : "");
  };
  list(r.only_ref, "only in the reference:");
  list(r.only_cand, "only in the candidate:");
  if (folded) fmt::print(out, "({} PASS rows folded; --all shows every row)\n", folded);
  if (!info.command.empty()) fmt::print(out, "reproduce   {}\n", info.command);
}

}  // namespace tdiff
