#pragma once
// Greedy generation by the float64 reference (docs/design/generation.md §1): every row's prompt
// prefilled in its chunks, then `n` tokens, each the argmax of the previous position's logits
// (the lowest id on an exact tie), every token one decode step of refcpu against its cache
// (exec/step_run.h), so n tokens cost n token-steps, not n prefills. What `tdiff case new
// --generate N` writes as a case's decoded tokens; in exact arithmetic they are the argmax of
// the prefill's rows (model-spec §10.1), which tests/e2e/generation_steps_test.cpp checks.
#include <cstdint>
#include <functional>
#include <vector>

#include "formats/weights.h"
#include "model/batch.h"
#include "model/config.h"

namespace tdiff {

// `prompts`: unpadded rows of one length P. Returns the rows with their n tokens appended
// ([B, P + n]). `on_token` (optional) is told each generated position as it is chosen.
Tensor greedy_generate(const ModelConfig& c, WeightStore& weights, const Batch& prompts, std::int64_t n,
                       const std::vector<std::int64_t>& chunks,
                       const std::function<void(std::int64_t done, std::int64_t total)>& on_token = {});

}  // namespace tdiff
