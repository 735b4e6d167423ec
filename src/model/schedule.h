#pragma once
// A generation schedule (docs/design/generation.md §1): how a case's token sequence is run as
// an engine runs it: the prompt, prefilled whole or in chunks, then one decode step per
// remaining token. In exact arithmetic decode step t equals row t of a prefill over the whole
// sequence (model-spec §10.1), so the reference of a generation case is that one prefill and
// every step is judged against the rows of its positions.
//
// Positions count from the row's first token (a generation case is unpadded). Step s of the
// schedule's `steps()`: the chunks first (prefill), then decode steps [p, p + 1) for p = P … S−1.
// The tokens a generation predicts are the logits rows P−1 … S−1 (the prompt's last row predicts
// the first decoded token; each decode step the next); `predicting_rows()` lists them.
#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.h"

namespace tdiff {

struct ScheduleStep {
  std::int64_t begin = 0, end = 0;  // positions [begin, end)
  bool decode = false;              // one token against the cache (else a prefill chunk)
};

struct Schedule {
  std::int64_t prompt = 0;            // P; 0: not a generation case (one prefill of everything)
  std::vector<std::int64_t> chunks;   // prefill chunk sizes, summing to P

  bool generation() const { return prompt > 0; }
  // The decode steps of a row of `seq` tokens (S − P).
  std::int64_t decode_steps(std::int64_t seq) const { return generation() ? seq - prompt : 0; }
  std::vector<ScheduleStep> steps(std::int64_t seq) const;
  // The positions whose logits predict a generated token: P − 1 … S − 1.
  std::vector<std::int64_t> predicting_rows(std::int64_t seq) const;
  // "prompt 12 (chunks 5,3,4), 6 decode steps"; "" for a prefill case.
  std::string describe(std::int64_t seq) const;

  // A schedule of `decode` decode steps after a prompt of the batch's rows less them, prefilled
  // in `chunks` (empty: whole). InputError, naming `source`, for a schedule the batch cannot
  // run: padded rows, no prompt token left, chunks not summing to the prompt.
  static Schedule make(const Batch& batch, std::int64_t decode, const std::vector<std::int64_t>& chunks,
                       const std::string& source);
};

// "5,3,7" -> {5, 3, 7}: positive integers; InputError naming `what` otherwise.
std::vector<std::int64_t> parse_chunk_list(const std::string& text, const std::string& what);

}  // namespace tdiff
