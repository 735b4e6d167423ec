#include "history/legacy_import.h"

#include <cstdlib>
#include <filesystem>
#include <map>

#include "casefile/case_file.h"
#include "casefile/h5_reader.h"

namespace tdiff::history {

namespace {

// One CSV record from `at` on (RFC 4180: "" inside quotes is a quote); `at` moves past it.
std::vector<std::string> csv_record(const std::string& text, std::size_t& at) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (; at < text.size(); ++at) {
    const char c = text[at];
    if (quoted) {
      if (c == '"' && at + 1 < text.size() && text[at + 1] == '"') fields.back() += '"', ++at;
      else if (c == '"') quoted = false;
      else fields.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      ++at;
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

double number(const std::string& s) {
  if (s.empty()) return kNone;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() ? kNone : v;
}

// "ci", "bisect", "determinism", "batch-sweep" from the attributes; plain runs had none.
std::string kind_of(const std::map<std::string, std::string>& a) {
  for (const char* k : {"kind", "command"})
    if (const auto it = a.find(k); it != a.end()) return it->second;
  return "run";
}

}  // namespace

void add_report_csv(RunEntry& e, const std::string& csv) {
  std::size_t at = 0;
  const std::vector<std::string> header = csv_record(csv, at);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = header.size(); i-- > 0;) col[header[i]] = i;  // the first of a repeated name wins
  auto field = [&](const std::vector<std::string>& row, const char* name) -> std::string {
    const auto it = col.find(name);
    return it == col.end() || it->second >= row.size() ? "" : row[it->second];
  };
  while (at < csv.size()) {
    const std::vector<std::string> row = csv_record(csv, at);
    if (field(row, "stage").empty()) continue;
    StageRecord s;
    const std::string stage = field(row, "stage"), tensor = field(row, "tensor");
    s.key = tensor.empty() ? stage : stage + "/" + tensor;
    const auto dot = stage.find('.');
    s.op_class = stage.size() > 1 && stage[0] == 'L' && dot != std::string::npos ? stage.substr(dot + 1) : stage;
    const std::string mismatch = field(row, "routing_mismatch_share");
    s.error = number(mismatch.empty() ? field(row, "rel_l2") : mismatch);
    s.expected = number(field(row, "expected"));
    s.ratio = number(field(row, "expected_ratio"));
    s.verdict = field(row, "verdict");
    if (!field(row, "kl_mean").empty()) {
      e.logits_kl = number(field(row, "kl_mean"));
      e.logits_top1 = number(field(row, "top1_agree"));
      e.logits_top10 = number(field(row, "topk_overlap_mean"));
    }
    e.stages.push_back(std::move(s));
  }
}

std::vector<RunEntry> read_case_records(const std::string& case_path) {
  const auto env = read_env_records(case_path);
  std::vector<RunEntry> out;
  for (const std::string& id : case_runs(case_path)) {
    RunEntry e;
    e.id = id;
    e.case_path = case_path;
    e.case_name = std::filesystem::path(case_path).stem().string();
    e.attrs = h5_read_attrs(case_path, "/runs/" + id);
    e.kind = kind_of(e.attrs);
    if (const auto it = env.find(id); it != env.end()) e.env = it->second;
    e.date_utc = e.env.date_utc;
    e.backend = e.attrs.count("backend") ? e.attrs.at("backend") : e.env.backend;
    e.policy = e.attrs.count("policy") ? e.attrs.at("policy") : e.env.policy;
    e.selections = e.attrs.count("selections") ? e.attrs.at("selections") : "";
    e.build = build_of(e.env);
    e.label = default_label(e);
    if (const auto it = e.attrs.find("report_csv"); it != e.attrs.end()) {
      add_report_csv(e, it->second);
      e.attrs.erase(it);  // now the stage rows
    }
    e.verdict = e.attrs.count("verdict") ? e.attrs.at("verdict") : "";
    e.first_divergence = e.attrs.count("first_divergence") ? e.attrs.at("first_divergence") : "";
    for (const char* k : {"outcome", "summary", "reason"})
      if (const auto it = e.attrs.find(k); it != e.attrs.end() && e.summary.empty()) e.summary = it->second;
    e.attrs["imported_from"] = "the case file";
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tdiff::history
