// The model statistics as a terminal table, CSV and JSON.
#include <cmath>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/stats_report.h"

namespace tdiff {

namespace {

struct StatColumn {
  const char* name;
  std::function<double(const LayerStats&)> get;
};

double undefined() { return std::nan(""); }

// Every column of the CSV and JSON, in order.
const std::vector<StatColumn>& stat_columns() {
  static const std::vector<StatColumn> cols{
      {"max_logit", [](const LayerStats& l) { return l.max_logit; }},
      {"entropy_p10", [](const LayerStats& l) { return l.entropy.p10; }},
      {"entropy_p50", [](const LayerStats& l) { return l.entropy.p50; }},
      {"entropy_p90", [](const LayerStats& l) { return l.entropy.p90; }},
      {"sink_mass", [](const LayerStats& l) { return l.sink_mass; }},
      {"sink_heads", [](const LayerStats& l) { return l.sink_heads; }},
      {"first_mass", [](const LayerStats& l) { return l.first_mass; }},
      {"act_max", [](const LayerStats& l) { return l.act_max; }},
      {"act_median", [](const LayerStats& l) { return l.act_median; }},
      {"act_ratio", [](const LayerStats& l) { return l.act_ratio; }},
      {"margin_p10", [](const LayerStats& l) { return l.routed ? l.margin.p10 : undefined(); }},
      {"margin_p50", [](const LayerStats& l) { return l.routed ? l.margin.p50 : undefined(); }},
      {"margin_p90", [](const LayerStats& l) { return l.routed ? l.margin.p90 : undefined(); }},
  };
  return cols;
}

std::string short_type(const std::string& t) {
  if (t.starts_with("sliding")) return "sliding";
  if (t.starts_with("compressed_sparse")) return "csa";
  if (t.starts_with("heavily")) return "hca";
  return t;
}

}  // namespace

void print_stats(std::FILE* out, const ModelStats& m) {
  fmt::print(out, "model statistics of {} (float64 reference, {} real tokens)\n\n", m.case_path, m.tokens);
  fmt::print(out, "                   attention logits and probabilities                    residual stream          "
                  "router top-k margin\n");
  fmt::print(out, "layer type     max|l|  entropy p10   p50   p90  sink  heads  first     max|x|  median  max/med  "
                  "     p10       p50       p90\n");
  for (const auto& l : m.layers) {
    std::string margin = "      (hash layer: chosen by token id)";
    if (l.routed) margin = fmt::format("{:9.2e} {:9.2e} {:9.2e}", l.margin.p10, l.margin.p50, l.margin.p90);
    fmt::print(out, "L{:02d}   {:<8} {:6.1f}       {:5.2f} {:5.2f} {:5.2f}  {:4.2f}  {:4.0f}%  {:5.3f}  {:9.4g} {:7.3f} {:8.0f}  {}\n",
               l.layer, short_type(l.type), l.max_logit, l.entropy.p10, l.entropy.p50, l.entropy.p90, l.sink_mass,
               100 * l.sink_heads, l.first_mass, l.act_max, l.act_median, l.act_ratio, margin);
  }
  fmt::print(out, "\nmax|l|: largest |pre-softmax logit| (scaled by 1/sqrt(d)); entropy: nats over (query token, head), "
                  "the sink as one outcome;\nsink: mean probability on the learned sink; heads: share of heads whose "
                  "mean sink probability is >= 0.5; first: mean\nprobability on the row's first token; max|x|, median: "
                  "|x| of the layer's output streams; margin: (k-th - (k+1)-th) of score + bias.\n");
}

std::string render_stats_csv(const ModelStats& m) {
  std::string o = "layer,type";
  for (const auto& c : stat_columns()) o += std::string(",") + c.name;
  o += "\n";
  for (const auto& l : m.layers) {
    o += fmt::format("{},{}", l.layer, l.type);
    for (const auto& c : stat_columns()) {
      const double v = c.get(l);
      o += std::isnan(v) ? std::string(",") : fmt::format(",{}", v);
    }
    o += "\n";
  }
  return o;
}

std::string render_stats_json(const ModelStats& m) {
  nlohmann::json j;
  j["case"] = m.case_path;
  j["tokens"] = m.tokens;
  j["layers"] = nlohmann::json::array();
  for (const auto& l : m.layers) {
    nlohmann::json row{{"layer", l.layer}, {"type", l.type}};
    for (const auto& c : stat_columns()) {
      const double v = c.get(l);
      row[c.name] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
    }
    j["layers"].push_back(std::move(row));
  }
  return j.dump(2) + "\n";
}

}  // namespace tdiff
