#include "model/schedule.h"

#include <charconv>
#include <numeric>

#include <fmt/format.h>

#include "base/error.h"

namespace tdiff {

std::vector<ScheduleStep> Schedule::steps(std::int64_t seq) const {
  std::vector<ScheduleStep> out;
  if (!generation()) return {{0, seq, false}};
  std::int64_t at = 0;
  for (const auto c : chunks) out.push_back({at, at + c, false}), at += c;
  for (std::int64_t p = prompt; p < seq; ++p) out.push_back({p, p + 1, true});
  return out;
}

std::vector<std::int64_t> Schedule::predicting_rows(std::int64_t seq) const {
  std::vector<std::int64_t> rows;
  for (std::int64_t p = generation() ? prompt - 1 : seq; p < seq; ++p) rows.push_back(p);
  return rows;
}

std::string Schedule::describe(std::int64_t seq) const {
  if (!generation()) return "";
  const std::string how = chunks.size() == 1 ? "whole" : fmt::format("chunks {}", fmt::join(chunks, ","));
  const auto n = decode_steps(seq);
  return fmt::format("prompt {} ({}), {} decode step{}", prompt, how, n, n == 1 ? "" : "s");
}

Schedule Schedule::make(const Batch& batch, std::int64_t decode, const std::vector<std::int64_t>& chunks,
                        const std::string& source) {
  const std::int64_t S = batch.seq();
  for (std::int64_t r = 0; r < batch.rows(); ++r)
    if (batch.length[static_cast<std::size_t>(r)] != S)
      input_error("{}: row {} holds {} of {} tokens: a generation schedule needs rows of one length (batch 1, or "
                  "equal-length prompts; engines decode padded rows apart)",
                  source, r, batch.length[static_cast<std::size_t>(r)], S);
  if (decode < 1 || decode >= S)
    input_error("{}: {} decode steps in rows of {} tokens (at least 1, and at least one prompt token left)", source,
                decode, S);
  Schedule s;
  s.prompt = S - decode;
  s.chunks = chunks.empty() ? std::vector<std::int64_t>{s.prompt} : chunks;
  const auto sum = std::accumulate(s.chunks.begin(), s.chunks.end(), std::int64_t{0});
  if (sum != s.prompt)
    input_error("{}: prefill chunks {} sum to {}, not the prompt's {} tokens ({} tokens less {} decode steps)", source,
                fmt::join(s.chunks, ","), sum, s.prompt, S, decode);
  return s;
}

std::vector<std::int64_t> parse_chunk_list(const std::string& text, const std::string& what) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v <= 0)
      input_error("{} '{}': '{}' is not a positive number of tokens (a list such as 5,3,7)", what, text, item);
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

}  // namespace tdiff
