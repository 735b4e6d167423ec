#include "report/html_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "report/summary.h"

namespace tdiff::report {

namespace {

// Drawing area inside a 1000 x 220 viewBox; the SVG scales with the page width.
constexpr double kW = 1000, kH = 220, kLeft = 64, kRight = 12, kTop = 26, kBottom = 30;

const char* verdict_css(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::warn: return "warn";
    case Verdict::fail: return "fail";
  }
  return "";
}

// 1, 2 or 5 times a power of ten, at least x: tick steps people read at a glance.
double nice_step(double x) {
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= x * (1 - 1e-9)) return m * p;
  return 10 * p;
}

// A vertical line through point `i`, labelled at its top (right of it, or left near the edge).
std::string marker_svg(double x, double top, double bottom, const std::string& label) {
  const bool left = x > kW - 260;
  return fmt::format("<line class=\"marker\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\"/>\n"
                     "<text class=\"mlabel\" x=\"{3:.1f}\" y=\"{4}\" text-anchor=\"{5}\">{6}</text>\n",
                     x, top, bottom, left ? x - 4 : x + 4, top + 10, left ? "end" : "start", html_escape(label));
}

}  // namespace

std::string svg_plot(const PlotSpec& spec) {
  PlotSpec s = spec;
  const double raw = s.y_hi > s.y_lo ? s.y_hi - s.y_lo : 1.0;
  const double step = std::max(nice_step(raw / 4), s.min_step);
  s.y_lo = std::floor(s.y_lo / step + 1e-9) * step;
  s.y_hi = std::ceil(s.y_hi / step - 1e-9) * step;
  if (s.y_hi <= s.y_lo) s.y_hi = s.y_lo + step;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const std::size_t n = std::max<std::size_t>(s.points.size(), 1);
  const double span = s.y_hi - s.y_lo;
  auto x_of = [&](double i) { return kLeft + (i + 0.5) * pw / static_cast<double>(n); };
  auto y_of = [&](double y) { return kTop + (s.y_hi - std::clamp(y, s.y_lo, s.y_hi)) / span * ph; };

  std::string o = fmt::format(
      "<svg class=\"plot\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
      kW, kH, html_escape(s.title));
  o += fmt::format("<text class=\"ptitle\" x=\"{}\" y=\"16\">{}</text>\n", kLeft, html_escape(s.title));

  // Layer bands, every other one shaded; labels thinned out so that they never overlap.
  const double band_px = s.bands.empty() ? pw : pw / static_cast<double>(s.bands.size());
  const std::size_t label_every = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(30.0 / band_px)));
  for (std::size_t b = 0; b < s.bands.size(); ++b) {
    const auto& band = s.bands[b];
    const double x0 = kLeft + static_cast<double>(band.begin) * pw / static_cast<double>(n);
    const double x1 = kLeft + static_cast<double>(band.end) * pw / static_cast<double>(n);
    if (b % 2 == 1)
      o += fmt::format("<rect class=\"band\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\"/>\n", x0, kTop,
                       x1 - x0, ph);
    if (b % label_every == 0)
      o += fmt::format("<text class=\"blabel\" x=\"{:.1f}\" y=\"{}\">{}</text>\n", (x0 + x1) / 2, kH - 10,
                       html_escape(band.label));
  }

  // Axes and y ticks.
  o += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft, kTop, pw, ph);
  const int ticks = static_cast<int>(std::lround(span / step));
  for (int t = 0; t <= ticks; ++t) {
    const double y = s.y_lo + step * t, py = y_of(y);
    o += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\"/>\n", kLeft, py, kLeft + pw, py);
    o += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\">{}</text>\n", kLeft - 6, py + 4,
                     html_escape(s.tick ? s.tick(y) : num(y)));
  }

  // Threshold lines over their stages, labelled at their right end.
  for (const auto& l : s.lines) {
    if (l.y < s.y_lo || l.y > s.y_hi) continue;
    const double py = y_of(l.y);
    const double x0 = kLeft + static_cast<double>(l.begin) * pw / static_cast<double>(n);
    const double x1 = l.end ? kLeft + static_cast<double>(l.end) * pw / static_cast<double>(n) : kLeft + pw;
    o += fmt::format("<line class=\"thr {}\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", l.css, x0, py,
                     x1, py);
    if (!l.label.empty())
      o += fmt::format("<text class=\"tlabel {}\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", l.css, x1 - 4, py - 4,
                       html_escape(l.label));
  }

  if (s.marker >= 0 && static_cast<std::size_t>(s.marker) < s.points.size())
    o += marker_svg(x_of(static_cast<double>(s.marker)), kTop, kTop + ph, s.marker_label);

  // The values: one polyline, then a linked point per stage (drawn worst last, on top).
  if (!s.points.empty()) {
    o += "<polyline class=\"series\" points=\"";
    for (std::size_t i = 0; i < s.points.size(); ++i)
      o += fmt::format("{:.1f},{:.1f} ", x_of(static_cast<double>(i)), y_of(s.points[i].y));
    o += "\"/>\n";
  }
  const double r = std::clamp(pw / static_cast<double>(n) / 2.5, 1.6, 4.0);
  for (Verdict v : {Verdict::pass, Verdict::warn, Verdict::fail})
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const auto& p = s.points[i];
      if (p.verdict != v) continue;
      o += fmt::format(
          "<a href=\"{}\"><circle class=\"pt {}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\"><title>{}</title></circle></a>\n",
          html_escape(p.href), verdict_css(v), x_of(static_cast<double>(i)), y_of(p.y),
          v == Verdict::pass ? r : r + 1.2, html_escape(p.tip));
    }
  o += "</svg>\n";
  return o;
}

}  // namespace tdiff::report
