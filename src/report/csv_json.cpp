// report.csv and report.json: every metric of every tensor, for scripts.
#include <cmath>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/version.h"
#include "diff/divergence.h"
#include "diff/location.h"
#include "diff/metric_fields.h"
#include "diff/step_errors.h"
#include "report/report.h"
#include "report/depth.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::csv_field;

// Shortest text that reads back to the same double ("nan", "inf" for the others).
std::string full(double v) { return report::num(v, "{}"); }
std::string opt_num(bool has, double v) { return has ? full(v) : ""; }

bool integer_tensor(const TensorDiff& d) { return d.kind == TensorKind::routing || d.kind == TensorKind::exact; }
// A distance between values or where it peaks (cosine, max_abs, argmax_*): meaningless between ids.
bool distance_field(const char* name, const MetricValue& v) {
  return std::holds_alternative<double>(v) || std::string_view(name).starts_with("argmax");
}

// One report.csv column: its header name and its text for a row.
struct Column {
  std::string name;
  std::function<std::string(const TensorDiff&, const CompareResult&)> text;
};

std::string csv_text(const MetricValue& v) {
  if (const double* d = std::get_if<double>(&v)) return full(*d);
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "1" : "0";
  return std::to_string(std::get<std::int64_t>(v));
}

// The CSV columns of an optional metrics block (logits, routing): empty where a row lacks it.
template <class Stats>
void add_optional_columns(std::vector<Column>& cols, std::span<const MetricField<Stats>> fields,
                          std::optional<Stats> TensorDiff::*block) {
  for (const auto& f : fields)
    if (f.csv && (f.show & kShowFiles))
      cols.push_back({f.csv, [f, block](const TensorDiff& d, const CompareResult&) { return d.*block ? csv_text(f.value(*(d.*block))) : ""; }});
}

// The error the candidate's formats explain beside the measured one, and where the largest
// error is (diff/location.h), empty where a row has none.
void add_expected_columns(std::vector<Column>& c) {
  auto e = [](const TensorDiff& d) { return d.expected && !std::isnan(d.tolerance_ratio) ? &*d.expected : nullptr; };
  c.push_back({"expected", [e](const TensorDiff& d, const CompareResult&) { return e(d) ? full(e(d)->rel) : ""; }});
  c.push_back({"expected_elem", [e](const TensorDiff& d, const CompareResult&) { return e(d) ? full(e(d)->elem) : ""; }});
  c.push_back({"expected_ratio", [e](const TensorDiff& d, const CompareResult&) { return e(d) ? full(d.tolerance_ratio) : ""; }});
  c.push_back({"expected_format", [e](const TensorDiff& d, const CompareResult&) { return e(d) ? csv_field(e(d)->format) : ""; }});
  c.push_back({"err_at", [](const TensorDiff& d, const CompareResult& r) { return csv_field(report::location_of(r, d)); }});
  c.push_back({"err_kind", [](const TensorDiff& d, const CompareResult&) {
                 return csv_field(pointed_name(pointed_element(d).what));
               }});  // The reference's conditioning (G, and the gain of the row that decided the element ratio)
  // and the measured floor: its ratio and which rule decided the verdict.
  c.push_back({"conditioning", [e](const TensorDiff& d, const CompareResult&) { return e(d) ? full(e(d)->gain_l2) : ""; }});
  c.push_back({"conditioning_at_err", [e](const TensorDiff& d, const CompareResult&) {
                 return e(d) && e(d)->conditioned() ? full(e(d)->gain_at) : "";
               }});
  c.push_back({"floor_ratio", [](const TensorDiff& d, const CompareResult&) {
                 return std::isnan(d.floor_ratio) ? "" : full(d.floor_ratio);
               }});
  c.push_back({"decided_by", [](const TensorDiff& d, const CompareResult&) { return csv_field(d.decided_by); }});
  // A free-running candidate's rows left out because their token followed its own selection.
  c.push_back({"diverged_rows", [](const TensorDiff& d, const CompareResult& r) {
                 return r.divergence ? std::to_string(d.diverged_rows) : std::string();
               }});
  c.push_back({"diverged_rel_l2", [](const TensorDiff& d, const CompareResult&) {
                 return std::isnan(d.diverged_rel_l2) ? std::string() : full(d.diverged_rel_l2);
               }});
}

// The strongest slice of the systematic fits (diff/systematic.h): its score, always, and its
// text when it decided the verdict; empty where the tensor had no fit.
bool systematic_fired(const TensorDiff& d, const SliceFinding& f) {
  return finding_fires(f, d.thresholds.systematic, d.systematic->unit_for(f));
}
void add_systematic_columns(std::vector<Column>& c) {
  c.push_back({"systematic_score", [](const TensorDiff& d, const CompareResult&) {
                 return d.systematic ? full(d.systematic->score()) : std::string();
               }});
  c.push_back({"systematic", [](const TensorDiff& d, const CompareResult&) {
                 if (!d.systematic || d.systematic->findings.empty()) return std::string();
                 const SliceFinding& f = d.systematic->findings.front();
                 return systematic_fired(d, f) ? csv_field(finding_text(*d.systematic, f)) : std::string();
               }});
}

nlohmann::json number(double v);

// Every family's strongest slice, and whether it decided the verdict.
nlohmann::json systematic_json(const TensorDiff& d) {
  const SystematicFit& s = *d.systematic;
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : s.findings) {
    nlohmann::json j = {{"family", f.family}, {"slice", f.slice}, {"fault", slice_fault_name(f.fault)},
                        {"value", number(f.value)}, {"se", number(f.se)}, {"typical", number(f.typical)},
                        {"spread", number(f.spread)}, {"ref_rms", number(f.ref_rms)}, {"z_own", number(f.z_own)},
                        {"z_spread", number(f.z_spread)}, {"score", number(f.score())},
                        {"fired", systematic_fired(d, f)}, {"text", finding_text(s, f)}};
    if (f.fault == SliceFault::swap)
      j.update({{"partner", f.partner}, {"partner_value", number(f.partner_value)}, {"match", number(f.swap_match)}});
    findings.push_back(std::move(j));
  }
  return {{"score", number(s.score())}, {"slices", s.slices}, {"threshold", number(d.thresholds.systematic)},
          {"findings", findings}};
}

// stage, tensor, the lead metrics, verdict, the other metrics, what the row compared, the
// logits and routing metrics, reason.
const std::vector<Column>& csv_columns() {
  static const std::vector<Column> cols = [] {
    std::vector<Column> c = {{"stage", [](const TensorDiff& d, const CompareResult&) { return csv_field(d.stage); }},
                             {"tensor", [](const TensorDiff& d, const CompareResult&) { return csv_field(d.tensor); }}};
    auto metrics = [&](bool lead) {
      for (const auto& f : tensor_metric_fields())
        if ((f.show & kShowFiles) && f.csv && ((f.show & kShowLead) != 0) == lead)
          c.push_back({f.csv, [f](const TensorDiff& d, const CompareResult&) {
                         // Distances between ids mean nothing: integer tensors keep only their counts.
                         const MetricValue v = f.value(d.metrics);
                         return integer_tensor(d) && distance_field(f.name, v) ? std::string() : csv_text(v);
                       }});
    };
    metrics(true);
    c.push_back({"verdict", [](const TensorDiff& d, const CompareResult&) { return std::string(verdict_name(d.verdict)); }});
    metrics(false);
    c.push_back({"kind", [](const TensorDiff& d, const CompareResult&) { return std::string(tensor_kind_name(d.kind)); }});
    c.push_back({"dtype_ref", [](const TensorDiff& d, const CompareResult&) { return std::string(dtype_name(d.dtype_ref)); }});
    c.push_back({"dtype_cand", [](const TensorDiff& d, const CompareResult&) { return std::string(dtype_name(d.dtype_cand)); }});
    c.push_back({"shape", [](const TensorDiff& d, const CompareResult&) { return csv_field(shape_str(d.shape)); }});
    c.push_back({"floor_rmse", [](const TensorDiff& d, const CompareResult&) { return opt_num(d.floor_rmse.has_value(), d.floor_rmse.value_or(0)); }});
    add_expected_columns(c);
    add_optional_columns(c, logits_metric_fields(), &TensorDiff::logits);
    add_optional_columns(c, routing_metric_fields(), &TensorDiff::routing);
    add_systematic_columns(c);
    c.push_back({"reason", [](const TensorDiff& d, const CompareResult&) { return csv_field(d.reason); }});
    return c;
  }();
  return cols;
}

nlohmann::json number(double v) {
  // JSON has no NaN or infinity: those become strings, so that no value is silently lost.
  if (std::isfinite(v)) return v;
  return report::num(v);
}

// A generation's tokens, step by step (diff/token_verdicts.h).
nlohmann::json token_json(const TokenSteps& t) {
  nlohmann::json steps = nlohmann::json::array(), loops = nlohmann::json::array();
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const TokenStep& st = t.steps[i];
    steps.push_back({{"step", static_cast<std::int64_t>(i) % t.steps_per_row}, {"row", st.row}, {"position", st.pos},
                     {"verdict", token_verdict_name(st.verdict)}, {"ref_token", st.ref_token},
                     {"cand_token", st.cand_token}, {"ref_gap", number(st.ref_gap)}, {"bound", number(st.bound)},
                     {"logprob_ref", number(st.logprob_ref)}, {"logprob_cand", number(st.logprob_cand)}});
  }
  for (const auto& l : t.loops)
    loops.push_back({{"row", l.row}, {"from_step", l.from_step}, {"ngram", l.ngram}, {"repeats", l.repeats}});
  const auto first = t.first_divergent < 0 ? nlohmann::json() : nlohmann::json(t.first_divergent % t.steps_per_row);
  return {{"summary", token_summary(t)},
          {"bounded", t.bounded},
          {"counts", {{"MATCH", t.counts[0]}, {"DRIFT", t.counts[1]}, {"TIE-FLIP", t.counts[2]}, {"WRONG", t.counts[3]}}},
          {"first_divergent_step", first},
          {"loops", loops},
          {"steps", steps}};
}

// `counts_only`: integer tensors, whose float distances (cosine, max_abs over ids) mean nothing.
template <class Stats>
nlohmann::json fields_json(const Stats& s, std::span<const MetricField<Stats>> fields, bool counts_only = false) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields)
    if (f.show & kShowFiles)
      std::visit(
          [&](auto v) {
            if constexpr (std::is_same_v<decltype(v), double>) {
              if (!counts_only) j[f.name] = number(v);
            } else if (!counts_only || !distance_field(f.name, f.value(s))) {
              j[f.name] = v;
            }
          },
          f.value(s));
  return j;
}

// The expected error (diff/expected.h) and the row's ratio to it.
nlohmann::json expected_json(const TensorDiff& d) {
  const ExpectedError& e = *d.expected;
  return {{"rel", number(e.rel)}, {"elem", number(e.elem)}, {"local", number(e.local)},
          {"inherited", number(e.inherited)}, {"n_acc", e.n_acc}, {"format", e.format}, {"source", e.source},
          {"ratio", number(d.tolerance_ratio)}, {"conditioning", number(e.gain_l2)},
          {"conditioning_at_err", e.conditioned() ? number(e.gain_at) : nlohmann::json()},
          {"measured_floor", d.measured_floor ? nlohmann::json{{"rel_l2", number(d.measured_floor->rel_l2)},
                                                               {"err_rel", number(d.measured_floor->err_rel)},
                                                               {"policy", d.measured_floor->label},
                                                               {"ratio", number(d.floor_ratio)}}
                                              : nlohmann::json()},
          {"decided_by", d.decided_by}};
}

// A flat index in the tensor's original layout (a padded dump's real rows back in the padded batch).
std::int64_t original_index(const CompareResult& r, const TensorDiff& d, std::int64_t flat) {
  return r.locator ? r.locator->original_index(d.key(), d.shape, flat) : flat;
}

nlohmann::json location_json(const Location& loc) {
  nlohmann::json at = nlohmann::json::object();
  for (const auto& [name, i] : loc) at[name] = i;
  return at;
}

// The largest finite error's element: flat index, named position and both values.
nlohmann::json largest_error_json(const CompareResult& r, const TensorDiff& d) {
  const TensorMetrics& m = d.metrics;
  const Location loc = locate(r.locator.get(), d.key(), d.shape, m.argmax_err_rel);
  return {{"index", original_index(r, d, m.argmax_err_rel)}, {"at", location_json(loc)}, {"err_rel", number(m.err_rel)},
          {"reference", number(m.ref_at_err)}, {"candidate", number(m.cand_at_err)}};
}

// The element the reports point at (diff/location.h): what it is, where, both values.
nlohmann::json pointed_json(const CompareResult& r, const TensorDiff& d, const PointedElement& e) {
  nlohmann::json j = {{"what", pointed_name(e.what)}, {"index", original_index(r, d, e.flat)},
                      {"at", location_json(locate_pointed(r.locator.get(), d, e))}};
  if (e.has_values) j["reference"] = number(e.ref), j["candidate"] = number(e.cand);
  return j;
}

nlohmann::json row_json(const CompareResult& r, const TensorDiff& d) {
  nlohmann::json j = {
      {"stage", d.stage}, {"tensor", d.tensor}, {"verdict", verdict_name(d.verdict)}, {"reason", d.reason},
      {"kind", tensor_kind_name(d.kind)}, {"dtype_ref", dtype_name(d.dtype_ref)},
      {"dtype_cand", dtype_name(d.dtype_cand)}, {"shape", d.shape}, {"metrics", fields_json(d.metrics, tensor_metric_fields(), integer_tensor(d))},
  };
  if (d.floor_rmse) j["floor_rmse"] = number(*d.floor_rmse);
  if (d.shape_cand) j["shape_cand"] = *d.shape_cand;  // the candidate's other shape (a FAIL)
  if (d.expected && !std::isnan(d.tolerance_ratio)) j["expected"] = expected_json(d);
  if (const PointedElement e = pointed_element(d); e.what != Pointed::none) j["location"] = pointed_json(r, d, e);
  if (!integer_tensor(d) && !d.shape_cand && d.metrics.argmax_err_rel >= 0 && d.metrics.err_rel > 0)
    j["largest_error"] = largest_error_json(r, d);
  if (d.logits) {
    const LogitsMetrics& l = *d.logits;
    nlohmann::json worst = nlohmann::json::array();
    for (const auto& t : l.worst) {
      auto tops = [](const std::vector<TopEntry>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& e : v) a.push_back({{"id", e.id}, {"prob", number(e.prob)}});
        return a;
      };
      worst.push_back({{"token", t.token}, {"kl", number(t.kl)}, {"top_ref", tops(t.top_ref)},
                       {"top_cand", tops(t.top_cand)}});
    }
    j["logits"] = fields_json(l, logits_metric_fields());
    j["logits"]["worst_tokens"] = worst;
  }
  if (d.routing) j["routing"] = fields_json(*d.routing, routing_metric_fields());
  if (d.systematic) j["systematic"] = systematic_json(d);
  if (d.diverged_rows) j["diverged"] = {{"rows", d.diverged_rows}, {"rel_l2", number(d.diverged_rel_l2)}};
  if (!d.step_rel_l2.empty()) {
    nlohmann::json steps = nlohmann::json::array();
    for (const double e : d.step_rel_l2) steps.push_back(number(e));
    j["step_rel_l2"] = steps;
  }
  return j;
}

}  // namespace

std::string render_csv(const CompareResult& r) {
  const auto& cols = csv_columns();
  std::vector<std::string> header;
  for (const auto& c : cols) header.push_back(c.name);
  std::string out = fmt::format("{}\n", fmt::join(header, ","));
  for (const auto& d : r.rows) {
    std::vector<std::string> f;
    for (const auto& c : cols) f.push_back(c.text(d, r));
    out += fmt::format("{}\n", fmt::join(f, ","));
  }
  // Tensors found on one side only: listed with empty metrics, MISSING as the verdict.
  std::size_t verdict = 0;
  while (cols[verdict].name != "verdict") ++verdict;
  auto missing = [&](const std::vector<std::string>& keys, const char* why) {
    for (const auto& k : keys) {
      auto [stage, tensor] = split_key(k);
      out += fmt::format("{},{},{}MISSING{},{}\n", csv_field(stage), csv_field(tensor), std::string(verdict - 2, ','),
                         std::string(cols.size() - verdict - 2, ','), why);
    }
  };
  missing(r.only_ref, "only in the reference");
  missing(r.only_cand, "only in the candidate");
  return out;
}

std::string render_json(const CompareResult& r, const RunInfo& info) {
  const auto counts = report::count_verdicts(r);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& d : r.rows) rows.push_back(row_json(r, d));
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : info.env) env[k] = v;
  const Thresholds& t = r.thresholds;  // the defaults, kept for readers of format_version 1
  const nlohmann::json thr = {{"cosine_fail", number(t.cosine_fail)}, {"cosine_warn", number(t.cosine_warn)},
         {"max_abs_fail", number(t.max_abs_fail)}, {"max_abs_warn", number(t.max_abs_warn)},
         {"max_abs_scaled", number(t.max_abs_scaled)},
         {"rel_l2_fail", number(t.rel_l2_fail)}, {"rel_l2_warn", number(t.rel_l2_warn)},
         {"top1_fail", number(t.top1_fail)}, {"kl_fail", number(t.kl_fail)}, {"kl_warn", number(t.kl_warn)},
         {"mismatch_fail", number(t.mismatch_fail)}, {"mismatch_warn", number(t.mismatch_warn)},
         {"floor_k", number(t.floor_k)}, {"floor_atol", number(t.floor_atol)}, {"tolerance", number(t.tolerance)},
         {"expected_warn", number(t.expected_warn)}, {"expected_fail", number(t.expected_fail)}};
  nlohmann::json j = {
      {"format", "tdiff-report"},
      {"format_version", 1},
      {"tdiff_version", TDIFF_VERSION},
      {"case", info.case_name},
      {"run_id", info.run_id},
      {"command", info.command},
      {"reference", r.label_ref},
      {"candidate", r.label_cand},
      {"verdict", verdict_name(r.verdict)},
      {"verdict_cause", report::verdict_cause(r)},
      {"verdict_line", report::verdict_line(r)},
      {"counts", {{"pass", counts.pass}, {"warn", counts.warn}, {"fail", counts.fail},
                  {"only_ref", r.only_ref.size()}, {"only_cand", r.only_cand.size()}}},
      {"padding_tokens", r.padding_tokens},
      {"diverged_tokens", r.divergence ? nlohmann::json(r.divergence->tokens()) : nlohmann::json()},
      {"diverged_from", r.divergence && r.divergence->tokens() ? nlohmann::json(r.divergence->first_stage()) : nlohmann::json()},
      {"first_fail", r.first_fail >= 0 ? nlohmann::json(r.rows[static_cast<std::size_t>(r.first_fail)].key())
                                       : nlohmann::json()},
      {"thresholds", thr},
      {"env", env},
      {"rows", rows},
      {"only_ref", r.only_ref},
      {"only_cand", r.only_cand},
  };
  if (const auto depth = report::error_over_depth(r); !depth.empty()) {
    nlohmann::json d = nlohmann::json::array();  // the residual streams' error after each layer
    for (const auto& x : depth)
      d.push_back({{"layer", x.layer}, {"rel_l2", number(x.rel_l2)}, {"expected", x.expected < 0 ? nlohmann::json() : number(x.expected)},
                   {"growth", x.growth < 0 ? nlohmann::json() : number(x.growth)}});
    j["error_over_depth"] = d;
  }
  for (const auto& row : r.rows)
    if (row.tokens) j["token_verdicts"][row.key()] = token_json(*row.tokens);
  if (r.p_vs_d)  // run --p-vs-d: the candidate's steps against its own prefill
    j["p_vs_d"] = {{"steps", r.p_vs_d->steps}, {"tensor", r.p_vs_d->tensor}, {"rows", r.p_vs_d->rows},
                   {"differing", r.p_vs_d->differing}, {"max_rel", number(r.p_vs_d->max_rel)},
                   {"top1_agree", number(r.p_vs_d->logits.top1_agree)}, {"kl_max", number(r.p_vs_d->logits.kl_max)}};
  if (!r.steps.empty()) {  // a generation run in steps: each step's span, and where a bound first broke
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& st : r.steps) steps.push_back({{"begin", st.begin}, {"end", st.end}, {"decode", st.decode}});
    j["generation_steps"] = {{"steps", steps}, {"note", report::step_note(r)}};
    if (const auto f = first_failing_step(r); f && f->fails)
      j["generation_steps"]["first_failing"] = {{"step", f->step}, {"tensor", r.rows[f->row].key()}, {"ratio", number(f->ratio)}};
  }
  if (!info.timing.empty()) {
    nlohmann::json t = nlohmann::json::object();  // phase -> seconds, to 0.1 ms
    for (const auto& [phase, sec] : info.timing) t[phase] = std::round(sec * 1e4) / 1e4;
    j["timing_s"] = t;
  }
  return j.dump(1) + "\n";
}

}  // namespace tdiff
