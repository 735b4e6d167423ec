// report.csv and report.json: every metric of every tensor, for scripts.
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/version.h"
#include "report/report.h"
#include "report/summary.h"

namespace tdiff {

namespace {

using report::csv_field;

// Shortest text that reads back to the same double ("nan", "inf" for the others).
std::string full(double v) { return report::num(v, "{}"); }
std::string opt_num(bool has, double v) { return has ? full(v) : ""; }

const char* kColumns =
    "stage,tensor,cosine,max_abs,rmse,rel_l2,verdict,max_abs_scaled,max_rel,ref_rms,max_abs_ref,count,compared,"
    "n_diff,nan_ref,inf_ref,nan_cand,inf_cand,new_nonfinite,argmax_abs,argmax_abs_scaled,kind,dtype_ref,dtype_cand,"
    "shape,floor_rmse,top1_agree,topk_overlap_mean,topk_overlap_min,kl_mean,kl_p99,kl_max,routing_equal_share,"
    "routing_mismatch_share,routing_flips,routing_ties,routing_explained,routing_unexplained_share,routing_replayed,"
    "reason\n";

nlohmann::json number(double v) {
  // JSON has no NaN or infinity: those become strings, so that no value is silently lost.
  if (std::isfinite(v)) return v;
  return report::num(v);
}

nlohmann::json row_json(const TensorDiff& d) {
  const TensorMetrics& m = d.metrics;
  nlohmann::json j = {
      {"stage", d.stage}, {"tensor", d.tensor}, {"verdict", verdict_name(d.verdict)}, {"reason", d.reason},
      {"kind", tensor_kind_name(d.kind)}, {"dtype_ref", dtype_name(d.dtype_ref)},
      {"dtype_cand", dtype_name(d.dtype_cand)}, {"shape", d.shape},
      {"metrics",
       {{"cosine", number(m.cosine)}, {"max_abs", number(m.max_abs)},
        {"max_abs_scaled", number(m.max_abs_scaled)}, {"rmse", number(m.rmse)},
        {"rel_l2", number(m.rel_l2)}, {"max_rel", number(m.max_rel)}, {"ref_rms", number(m.ref_rms)},
        {"max_abs_ref", number(m.max_abs_ref)}, {"count", m.count}, {"compared", m.compared},
        {"n_diff", m.n_diff}, {"nan_ref", m.nan_ref}, {"inf_ref", m.inf_ref}, {"nan_cand", m.nan_cand},
        {"inf_cand", m.inf_cand}, {"new_nonfinite", m.new_nonfinite}, {"argmax_abs", m.argmax_abs},
        {"argmax_abs_scaled", m.argmax_abs_scaled}}},
  };
  if (d.floor_rmse) j["floor_rmse"] = number(*d.floor_rmse);
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
    j["logits"] = {{"tokens", l.tokens}, {"vocab", l.vocab}, {"nonfinite_tokens", l.nonfinite_tokens},
                   {"top1_agree", number(l.top1_agree)}, {"topk_overlap_mean", number(l.topk_overlap_mean)},
                   {"topk_overlap_min", number(l.topk_overlap_min)}, {"kl_mean", number(l.kl_mean)},
                   {"kl_p99", number(l.kl_p99)}, {"kl_max", number(l.kl_max)}, {"worst_tokens", worst}};
  }
  if (d.routing) {
    const RoutingMetrics& rt = *d.routing;
    j["routing"] = {{"tokens", rt.tokens}, {"k", rt.k}, {"equal_tokens", rt.equal_tokens},
                    {"tie_tokens", rt.tie_tokens}, {"flips", rt.flips}, {"equal_share", number(rt.equal_share)},
                    {"mismatch_share", number(rt.mismatch_share)}, {"explained_tokens", rt.explained_tokens},
                    {"unexplained_share", number(rt.unexplained_share)}, {"replayed", rt.replayed}};
  }
  return j;
}

}  // namespace

std::string render_csv(const CompareResult& r) {
  std::string out = kColumns;
  for (const auto& d : r.rows) {
    const TensorMetrics& m = d.metrics;
    const bool lg = d.logits.has_value(), rt = d.routing.has_value();
    const LogitsMetrics l = lg ? *d.logits : LogitsMetrics{};
    const RoutingMetrics ro = rt ? *d.routing : RoutingMetrics{};
    const std::vector<std::string> f = {
        csv_field(d.stage), csv_field(d.tensor), full(m.cosine), full(m.max_abs), full(m.rmse), full(m.rel_l2),
        verdict_name(d.verdict), full(m.max_abs_scaled), full(m.max_rel), full(m.ref_rms), full(m.max_abs_ref),
        std::to_string(m.count), std::to_string(m.compared), std::to_string(m.n_diff), std::to_string(m.nan_ref),
        std::to_string(m.inf_ref), std::to_string(m.nan_cand), std::to_string(m.inf_cand),
        std::to_string(m.new_nonfinite), std::to_string(m.argmax_abs), std::to_string(m.argmax_abs_scaled),
        tensor_kind_name(d.kind),
        std::string(dtype_name(d.dtype_ref)), std::string(dtype_name(d.dtype_cand)), csv_field(shape_str(d.shape)),
        opt_num(d.floor_rmse.has_value(), d.floor_rmse.value_or(0)), opt_num(lg, l.top1_agree),
        opt_num(lg, l.topk_overlap_mean), opt_num(lg, l.topk_overlap_min), opt_num(lg, l.kl_mean),
        opt_num(lg, l.kl_p99), opt_num(lg, l.kl_max), opt_num(rt, ro.equal_share), opt_num(rt, ro.mismatch_share),
        rt ? std::to_string(ro.flips) : "", rt ? std::to_string(ro.tie_tokens) : "",
        rt ? std::to_string(ro.explained_tokens) : "", opt_num(rt, ro.unexplained_share),
        rt ? (ro.replayed ? "1" : "0") : "", csv_field(d.reason)};
    out += fmt::format("{}\n", fmt::join(f, ","));
  }
  // Tensors found on one side only: listed with empty metrics.
  auto missing = [&](const std::vector<std::string>& keys, const char* why) {
    for (const auto& k : keys) {
      auto [stage, tensor] = split_key(k);
      out += fmt::format("{},{},,,,,MISSING{},{}\n", csv_field(stage), csv_field(tensor), std::string(32, ','), why);
    }
  };
  missing(r.only_ref, "only in the reference");
  missing(r.only_cand, "only in the candidate");
  return out;
}

std::string render_json(const CompareResult& r, const RunInfo& info) {
  const auto counts = report::count_verdicts(r);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& d : r.rows) rows.push_back(row_json(d));
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : info.env) env[k] = v;
  const Thresholds& t = info.thresholds;
  const nlohmann::json thr = {{"cosine_fail", number(t.cosine_fail)}, {"cosine_warn", number(t.cosine_warn)},
         {"max_abs_fail", number(t.max_abs_fail)}, {"max_abs_warn", number(t.max_abs_warn)},
         {"max_abs_scaled", number(t.max_abs_scaled)},
         {"rel_l2_fail", number(t.rel_l2_fail)}, {"rel_l2_warn", number(t.rel_l2_warn)},
         {"top1_fail", number(t.top1_fail)}, {"kl_fail", number(t.kl_fail)}, {"kl_warn", number(t.kl_warn)},
         {"mismatch_fail", number(t.mismatch_fail)}, {"mismatch_warn", number(t.mismatch_warn)},
         {"floor_k", number(t.floor_k)}, {"floor_atol", number(t.floor_atol)}};
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
      {"counts", {{"pass", counts.pass}, {"warn", counts.warn}, {"fail", counts.fail}}},
      {"first_fail", r.first_fail >= 0 ? nlohmann::json(r.rows[static_cast<std::size_t>(r.first_fail)].key())
                                       : nlohmann::json()},
      {"thresholds", thr},
      {"env", env},
      {"rows", rows},
      {"only_ref", r.only_ref},
      {"only_cand", r.only_cand},
  };
  return j.dump(1) + "\n";
}

}  // namespace tdiff
