#include "app/speed.h"

#include <algorithm>

#include <fmt/format.h>

#include "exec/timed_forward.h"
#include "history/series.h"

namespace tdiff::app {

history::SpeedRecord measure_speed(CaseSession& session, Backend& candidate, bool replay, int repeats,
                                   const std::string& compared_sha, const CompareResult& compared,
                                   const ThresholdPolicy& thresholds) {
  const TimedForwards t = time_forwards(session, candidate, replay, repeats, [repeats](int i, double seconds) {
    fmt::print(stderr, "timed forward {}/{}: {:.4g} s\n", i, repeats, seconds);
  });
  history::SpeedRecord s;
  s.repeats = repeats;
  const auto [lo, hi] = std::minmax_element(t.seconds.begin(), t.seconds.end());
  s.forward_s = history::median(t.seconds);
  s.spread_s = *hi - *lo;
  for (auto m : session.info.batch.mask.span<const std::uint8_t>()) s.tokens += m != 0;
  s.tokens_per_s = static_cast<double>(s.tokens) / s.forward_s;
  s.outputs_sha256 = t.logits_sha256;
  s.class_seconds = t.class_seconds;
  if (t.same_bits && t.logits_sha256 == compared_sha) {
    s.verified = "bitwise";
    return s;
  }
  // Other bits: verified when one more forward's logits are judged as the compared run's were.
  CompareResult d = timed_logits_diff(session, candidate, replay);
  judge(d, thresholds);
  Verdict judged = Verdict::pass;
  for (const auto& row : compared.rows)
    if (row.logits) judged = worst(judged, row.verdict);
  s.verified = d.verdict <= judged
                   ? fmt::format("within thresholds (other bits than the compared run's: {})",
                                 t.same_bits ? "the timed forwards agree among themselves" : "they vary run to run")
                   : fmt::format("no: the timed forward's logits are {} where the compared run's were {}",
                                 verdict_name(d.verdict), verdict_name(judged));
  return s;
}

void print_speed(const history::SpeedRecord& s) {
  fmt::print("speed       {} timed forward{}: median {:.4g} s (spread {:.2g} s), {:.4g} tokens/s; verified {}\n",
             s.repeats, s.repeats == 1 ? "" : "s", s.forward_s, s.spread_s, s.tokens_per_s, s.verified);
}

}  // namespace tdiff::app
