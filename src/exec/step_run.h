#pragma once
// A generation case run as an engine runs it (docs/design/generation.md §2): the prompt in its
// chunks, then one decode step per token, each step through the whole stage list over the
// step's new tokens only, its sequence-mixing stages against a cache laid out as engines lay
// it out (exec/generation_cache.h):
//   window_mask   the step's queries over the cache's window (computed here: exact logic)
//   attention     its kv input replaced by the layer's ring (window_keys); its entries input by
//                 the compressor's cached entries
//   pool          the compressor's cached rows and the step's; only the new entries go on
//   norm, rope    of the compressor's new entries (entry_rope at RunContext::first_entry);
//                 skipped in a step that finishes no window
//   cmp_mask, idx_score   over all cached entries; the batch's length is the step's end, its
//                 positions absolute
// Every other stage is per token and runs on the step's rows as in a prefill.
//
// In exact arithmetic step outputs equal the prefill's rows (model-spec §10.1), so after the
// last step every stage's outputs are put together in the prefill's layout (rows by position,
// entries in order, a window mask scattered back to key positions, score and selection rows
// padded as a prefill pads them) and handed to on_stage in stage order: the comparison,
// verdicts and reports of a prefill apply unchanged. Selection replay (hooks.replace) gives
// each step the reference's rows of its positions; hooks.cached is not asked (a reference
// stage computed step by step is not the stored prefill bit for bit).
#include <functional>
#include <vector>

#include "backend/executor.h"
#include "model/schedule.h"

namespace tdiff {

// Told each step as it ends: the step, its index and the step count, and the step's tensors
// ("<stage>/<tensor>": its rows only, entries only its new ones). A caller may write the next
// position's token into ctx.batch.ids here (greedy generation, exec/greedy.h).
using OnStep = std::function<void(const ScheduleStep&, std::size_t index, std::size_t count, const TensorMap& step)>;

// Runs `stages` over `batch` (ctx.batch: unpadded rows of one length) in the steps of
// `schedule`. Every backend must runs_steps(). on_stage (when set) sees each stage's
// assembled outputs after the last step; without it nothing is kept across steps.
void execute_steps(const std::vector<Stage>& stages, const Schedule& schedule,
                   const std::function<Backend&(const Stage&)>& backend_for, RunContext& ctx, const ExecutorHooks& hooks,
                   const OnStep& on_step = {});

}  // namespace tdiff
