#include "app/weight_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace tdiff::app {

WeightCheck WeightCheckOptions::check(const CaseSession& s) const {
  WeightCheck c = check_weight_files(s.weights->files().files(), s.info.checksums, s.info.file_stats, verify == "full");
  if (!c.cache_note.empty()) fmt::print(stderr, "tdiff: note: {}\n", c.cache_note);
  if (c.changed.empty()) return c;
  const std::string more = c.changed.size() > 1 ? fmt::format(" (and {} more)", c.changed.size() - 1) : "";
  if (!force)
    input_error("{}: the model's weights changed since the case was made: {}{}; pass --force to run anyway", s.path,
                c.changed.front(), more);
  fmt::print(stderr, "tdiff: warning: {}: the model's weights changed since the case was made: {}{}; going on (--force)\n",
             s.path, c.changed.front(), more);
  return c;
}

std::string WeightCheckOptions::note(const WeightCheck& c) const {
  if (!c.recorded) return "not recorded in the case";
  if (!c.changed.empty()) return fmt::format("forced: {}", fmt::join(c.changed, "; "));
  return fmt::format("{}: {} files match ({} hashed whole, {:.1f} GB; {:.2f} s)", verify, c.files, c.hashed_files,
                     static_cast<double>(c.hashed_bytes) / 1e9, c.seconds);
}

void WeightCheckOptions::refresh(CaseUpdate& u, const WeightCheck& c) { u.put_file_stats(c.refreshed); }

}  // namespace tdiff::app
