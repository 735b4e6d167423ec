#include "base/timing.h"

#include <fmt/format.h>

namespace tdiff {

void PhaseTimes::add(const std::string& phase, double seconds) {
  for (auto& [name, s] : phases_)
    if (name == phase) {
      s += seconds;
      return;
    }
  phases_.emplace_back(phase, seconds);
}

void PhaseTimes::add(const PhaseTimes& other, const std::string& prefix) {
  for (const auto& [name, s] : other.phases_) add(prefix + name, s);
}

double PhaseTimes::get(const std::string& phase) const {
  for (const auto& [name, s] : phases_)
    if (name == phase) return s;
  return 0.0;
}

std::string PhaseTimes::line(double total) const {
  if (total < 0) total = since_start();
  double covered = 0;
  std::string s = fmt::format("{:.2f} s:", total);
  bool first = true;
  for (const auto& [name, sec] : phases_) {
    covered += sec;
    if (sec < 0.005) continue;  // a list of zeros hides the phases that matter
    s += fmt::format("{} {} {:.2f}", first ? "" : ",", name, sec);
    first = false;
  }
  // Nested or overlapping phases can cover more than the wall time: then no "other".
  if (total - covered >= 0.005) s += fmt::format("{} other {:.2f}", first ? "" : ",", total - covered);
  return s;
}

}  // namespace tdiff
