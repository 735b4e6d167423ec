#include "report/history_html.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "report/summary.h"

namespace tdiff::report {

namespace {

constexpr double kW = 560, kH = 300, kPad = 48, kLeft = 78, kRight = 96;  // room for tick values and labels

// Maps [lo, hi] onto [a, b]; a degenerate range onto its middle. `log`: log10 first.
struct Axis {
  double lo, hi, a, b;
  bool log = false;
  double at(double v) const {
    const double x = log ? std::log10(v) : v, l = log ? std::log10(lo) : lo, h = log ? std::log10(hi) : hi;
    return h > l ? a + (x - l) / (h - l) * (b - a) : 0.5 * (a + b);
  }
};

Axis axis_of(const std::vector<double>& v, double a, double b, bool log) {
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  if (log && lo <= 0) log = false;
  const double margin = log ? 0 : 0.05 * (hi - lo);
  return {lo - margin, hi + margin, a, b, log};
}

std::string svg_open(const std::string& x_title, const std::string& y_title) {
  return fmt::format("<svg width='{0}' height='{1}' viewBox='0 0 {0} {1}' xmlns='http://www.w3.org/2000/svg' "
                     "font-family='sans-serif' font-size='11'><rect width='{0}' height='{1}' fill='#fff' stroke='#ccc'/>"
                     "<text x='{2}' y='{3}' text-anchor='middle'>{4}</text>"
                     "<text x='12' y='{5}' transform='rotate(-90 12 {5})' text-anchor='middle'>{6}</text>",
                     kW, kH, kW / 2, kH - 8, html_escape(x_title), kH / 2, html_escape(y_title));
}

std::string tick_labels(const Axis& x, const Axis& y) {
  return fmt::format("<text x='{}' y='{}'>{:.3g}</text><text x='{}' y='{}' text-anchor='end'>{:.3g}</text>"
                     "<text x='{}' y='{}' text-anchor='end'>{:.3g}</text><text x='{}' y='{}' text-anchor='end'>{:.3g}</text>",
                     x.a, kH - kPad + 14, x.lo, x.b, kH - kPad + 14, x.hi, kLeft - 4, y.a, y.lo, kLeft - 4, y.b + 10, y.hi);
}

// Time against accuracy, one point per build that has both.
std::string dual_curve(const HistoryCase& c, const std::string& accuracy, const std::string& time = "forward_s") {
  std::vector<const history::Build*> b;
  std::vector<double> xs, ys;
  for (const auto& build : c.builds) {
    const auto t = build.figures.find(time), a = build.figures.find(accuracy);
    if (t == build.figures.end() || a == build.figures.end()) continue;
    b.push_back(&build), xs.push_back(t->second.value), ys.push_back(a->second.value);
  }
  if (b.empty())
    return fmt::format("<p>No build has both a timed forward and {}: record speed with <code>tdiff run --timed N</code>.</p>",
                       html_escape(accuracy));
  const Axis x = axis_of(xs, kLeft, kW - kRight, false), y = axis_of(ys, kH - kPad, kPad, true);
  const std::string x_title = time == "forward_s" ? "median forward (s)" : time + " (s, the profiled forward)";
  std::string svg = svg_open(x_title, accuracy + (y.log ? " (log)" : "")) + tick_labels(x, y);
  std::string path;
  for (std::size_t i = 0; i < b.size(); ++i) path += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", x.at(xs[i]), y.at(ys[i]));
  svg += fmt::format("<polyline points='{}' fill='none' stroke='#999' stroke-dasharray='4 3'/>", path);
  for (std::size_t i = 0; i < b.size(); ++i) {
    const bool fail = b[i]->latest_verdict == "FAIL";
    svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='5' fill='{}'><title>{}: {:.4g} s, {} {:.4g}</title></circle>"
                       "<text x='{:.1f}' y='{:.1f}'>{}</text>",
                       x.at(xs[i]), y.at(ys[i]), fail ? "#c0392b" : "#2e86c1", html_escape(b[i]->label), xs[i],
                       html_escape(accuracy), ys[i], x.at(xs[i]) + 7, y.at(ys[i]) - 7, html_escape(b[i]->label));
  }
  return svg + "</svg>";
}

// One figure over the builds, its steps marked.
std::string series_chart(const HistoryCase& c, const std::string& figure, const std::vector<history::Step>& steps) {
  std::vector<double> ys;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < c.builds.size(); ++i)
    if (const auto it = c.builds[i].figures.find(figure); it != c.builds[i].figures.end())
      ys.push_back(it->second.value), at.push_back(i);
  if (ys.empty()) return "";
  const Axis x{0, static_cast<double>(std::max<std::size_t>(c.builds.size() - 1, 1)), kLeft, kW - kRight};
  const Axis y = axis_of(ys, kH - kPad, kPad, false);
  std::string svg = svg_open("build (in the order they ran)", figure);
  svg += fmt::format("<text x='{}' y='{}' text-anchor='end'>{:.3g}</text><text x='{}' y='{}' text-anchor='end'>{:.3g}</text>",
                     kLeft - 4, y.a, y.lo, kLeft - 4, y.b + 10, y.hi);
  for (const auto& s : steps)
    svg += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' stroke='#c0392b' stroke-dasharray='3 3'/>"
                       "<text x='{3:.1f}' y='{4}' fill='#c0392b'>step: {5:.3g} -> {6:.3g}</text>",
                       x.at(static_cast<double>(s.at)) - 0.5 * (x.at(1) - x.at(0)), kPad, kH - kPad,
                       x.at(static_cast<double>(s.at)) - 0.5 * (x.at(1) - x.at(0)) + 4, kPad + 12, s.before, s.after);
  std::string path;
  for (std::size_t k = 0; k < ys.size(); ++k) path += fmt::format("{}{:.1f},{:.1f}", k ? " " : "", x.at(static_cast<double>(at[k])), y.at(ys[k]));
  svg += fmt::format("<polyline points='{}' fill='none' stroke='#2e86c1'/>", path);
  for (std::size_t k = 0; k < ys.size(); ++k)
    svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='#2e86c1'><title>{}: {:.4g}</title></circle>",
                       x.at(static_cast<double>(at[k])), y.at(ys[k]), html_escape(c.builds[at[k]].label), ys[k]);
  return svg + "</svg>";
}

std::string build_table(const HistoryCase& c) {
  auto cell = [](const history::Build& b, const char* f, const char* spec) {
    const auto it = b.figures.find(f);
    return it == b.figures.end() ? std::string("-") : fmt::format(fmt::runtime(spec), it->second.value);
  };
  std::string t = "<table><tr><th>build</th><th>runs</th><th>verdict</th><th>forward s</th><th>tokens/s</th>"
                  "<th>verified</th><th>logits KL</th><th>top-1</th><th>worst ratio</th><th>last run</th></tr>";
  for (const auto& b : c.builds) {
    std::string verified = "-";
    for (const auto* e : b.runs)
      if (e->speed.repeats > 0) verified = e->speed.verified;
    t += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{}</td><td>{}</td></tr>",
                     html_escape(b.label), b.runs.size(), html_escape(b.latest_verdict), cell(b, "forward_s", "{:.4g}"),
                     cell(b, "tokens_per_s", "{:.4g}"), html_escape(verified), cell(b, "logits_kl", "{:.3g}"),
                     cell(b, "logits_top1", "{:.4f}"), cell(b, "worst_ratio", "{:.3g}"), html_escape(b.last_date));
  }
  return t + "</table>";
}

// Per stage class, its seconds in the profiled forward against its largest error: where a
// build bought a class's speed with its accuracy.
std::string per_class_curves(const HistoryCase& c) {
  std::vector<std::string> classes;
  for (const auto& b : c.builds)
    for (const auto& [name, p] : b.figures)
      if (name.rfind("seconds:", 0) == 0 && b.figures.count("error:" + name.substr(8)) &&
          std::find(classes.begin(), classes.end(), name.substr(8)) == classes.end())
        classes.push_back(name.substr(8));
  if (classes.empty()) return "";
  std::sort(classes.begin(), classes.end());
  std::string charts;
  for (const auto& cls : classes) charts += dual_curve(c, "error:" + cls, "seconds:" + cls);
  return "<h3>Per stage class: time against error</h3><div class='charts'>" + charts + "</div>";
}

}  // namespace

std::string render_history_html(const std::string& title, const std::vector<HistoryCase>& cases) {
  std::string h = fmt::format("<!doctype html><html><head><meta charset='utf-8'><title>{0}</title><style>"
                              "body{{font-family:sans-serif;margin:24px}}table{{border-collapse:collapse}}"
                              "td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}"
                              ".charts{{display:flex;flex-wrap:wrap;gap:12px}}</style></head><body><h1>{0}</h1>",
                              html_escape(title));
  for (const HistoryCase& c : cases) {
    h += fmt::format("<h2>{}</h2><div class='charts'>{}{}</div>{}", html_escape(c.name), dual_curve(c, "logits_kl"),
                     dual_curve(c, "worst_ratio"), build_table(c));
    std::string charts;
    for (std::size_t i = 0; i < c.steps.size(); ++i)
      if (!c.steps[i].second.empty() || c.steps[i].first.find(':') == std::string::npos)
        charts += series_chart(c, c.steps[i].first, c.steps[i].second);
    h += "<h3>Figures over builds (steps beyond the noise marked; per stage class only where one stepped)</h3>"
         "<div class='charts'>" + charts + "</div>";
    h += per_class_curves(c);
  }
  return h + "</body></html>\n";
}

}  // namespace tdiff::report
