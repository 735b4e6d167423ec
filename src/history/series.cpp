#include "history/series.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tdiff::history {

double median(std::vector<double> v) {
  if (v.empty()) return kNone;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// Every figure one run has (NaN-free).
std::map<std::string, double> figures_of(const RunEntry& e) {
  std::map<std::string, double> f;
  auto put = [&](const std::string& name, double v) {
    if (std::isfinite(v)) f[name] = v;
  };
  put("forward_s", e.speed.forward_s);
  put("tokens_per_s", e.speed.tokens_per_s);
  put("logits_kl", e.logits_kl);
  put("logits_top1", e.logits_top1);
  put("logits_top10", e.logits_top10);
  double worst = kNone;
  std::map<std::string, double> class_error;
  for (const StageRecord& s : e.stages) {
    if (std::isfinite(s.ratio)) worst = std::isnan(worst) ? s.ratio : std::max(worst, s.ratio);
    if (std::isfinite(s.error)) {
      auto [it, fresh] = class_error.emplace(s.op_class, s.error);
      if (!fresh) it->second = std::max(it->second, s.error);
    }
  }
  put("worst_ratio", worst);
  for (const auto& [cls, err] : class_error) put("error:" + cls, err);
  for (const auto& [cls, sec] : e.speed.class_seconds) put("seconds:" + cls, sec);
  return f;
}

// The L1 deviation of y[i, j) from its median.
double l1_cost(const std::vector<double>& y, std::size_t i, std::size_t j) {
  const double m = median(std::vector<double>(y.begin() + static_cast<long>(i), y.begin() + static_cast<long>(j)));
  double c = 0;
  for (std::size_t k = i; k < j; ++k) c += std::fabs(y[k] - m);
  return c;
}

}  // namespace

std::vector<Build> builds_of(const std::vector<RunEntry>& runs) {
  std::vector<Build> builds;
  std::map<std::string, std::size_t> at;
  for (const RunEntry& e : runs) {  // oldest first: a label's place is its first run's
    auto [it, fresh] = at.emplace(e.label, builds.size());
    if (fresh) builds.push_back({e.label, e.date_utc, e.date_utc, {}, "", {}});
    Build& b = builds[it->second];
    b.runs.push_back(&e);
    b.last_date = e.date_utc;
    if (!e.verdict.empty()) b.latest_verdict = e.verdict;
  }
  for (Build& b : builds) {
    std::map<std::string, std::vector<double>> values;
    for (const RunEntry* e : b.runs)
      for (const auto& [name, v] : figures_of(*e)) values[name].push_back(v);
    for (const auto& [name, v] : values) {
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      b.figures[name] = {median(v), v.size() > 1 ? *hi - *lo : kNone, static_cast<int>(v.size())};
    }
  }
  return builds;
}

bool higher_is_better(const std::string& figure) {
  return figure == "tokens_per_s" || figure == "logits_top1" || figure == "logits_top10";
}

std::vector<std::string> figure_names(const std::vector<Build>& builds) {
  std::vector<std::string> names = {"forward_s", "tokens_per_s", "logits_kl", "logits_top1", "logits_top10", "worst_ratio"};
  std::vector<std::string> present;
  for (const auto& n : names)
    if (std::any_of(builds.begin(), builds.end(), [&](const Build& b) { return b.figures.count(n); })) present.push_back(n);
  std::vector<std::string> classes;
  for (const Build& b : builds)
    for (const auto& [name, p] : b.figures)
      if (std::find(names.begin(), names.end(), name) == names.end() &&
          std::find(classes.begin(), classes.end(), name) == classes.end())
        classes.push_back(name);
  std::sort(classes.begin(), classes.end());
  present.insert(present.end(), classes.begin(), classes.end());
  return present;
}

std::vector<Step> detect_steps(const std::vector<double>& y_in, double noise) {
  std::vector<std::size_t> where;
  std::vector<double> y;
  for (std::size_t i = 0; i < y_in.size(); ++i)
    if (std::isfinite(y_in[i])) where.push_back(i), y.push_back(y_in[i]);
  const std::size_t n = y.size();
  if (n < 2) return {};
  const double penalty = 2 * noise + 1e-300;
  std::vector<double> best(n + 1, std::numeric_limits<double>::infinity());
  std::vector<std::size_t> from(n + 1, 0);
  best[0] = 0;
  for (std::size_t j = 1; j <= n; ++j)
    for (std::size_t i = 0; i < j; ++i) {
      const double c = best[i] + l1_cost(y, i, j) + (i > 0 ? penalty : 0);
      if (c < best[j]) best[j] = c, from[j] = i;
    }
  std::vector<std::size_t> starts;  // segment starts, last first
  for (std::size_t j = n; j > 0; j = from[j]) starts.push_back(from[j]);
  std::reverse(starts.begin(), starts.end());
  starts.push_back(n);
  std::vector<Step> steps;
  for (std::size_t k = 1; k + 1 < starts.size(); ++k) {
    const auto seg = [&](std::size_t a, std::size_t b) {
      return median(std::vector<double>(y.begin() + static_cast<long>(a), y.begin() + static_cast<long>(b)));
    };
    const double before = seg(starts[k - 1], starts[k]), after = seg(starts[k], starts[k + 1]);
    if (std::fabs(after - before) > noise) steps.push_back({where[starts[k]], before, after});
  }
  return steps;
}

double series_noise(const std::vector<Build>& builds, const std::string& figure, double relative) {
  double spread = 0;
  std::vector<double> values;
  for (const Build& b : builds)
    if (const auto it = b.figures.find(figure); it != b.figures.end()) {
      values.push_back(std::fabs(it->second.value));
      if (std::isfinite(it->second.spread)) spread = std::max(spread, it->second.spread);
    }
  return std::max(spread, relative * median(values));
}

}  // namespace tdiff::history
