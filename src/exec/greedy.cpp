#include "exec/greedy.h"

#include <cstring>

#include "base/error.h"
#include "exec/step_run.h"
#include "model/schedule.h"
#include "model/stage_graph.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

Tensor greedy_generate(const ModelConfig& c, WeightStore& weights, const Batch& prompts, std::int64_t n,
                       const std::vector<std::int64_t>& chunks,
                       const std::function<void(std::int64_t, std::int64_t)>& on_token) {
  const std::int64_t B = prompts.rows(), P = prompts.seq(), S = P + n;
  for (std::int64_t b = 0; b < B; ++b)
    if (prompts.length[static_cast<std::size_t>(b)] != P)
      input_error("--generate: prompt {} has {} tokens of {}: generation needs unpadded prompts of one length", b,
                  prompts.length[static_cast<std::size_t>(b)], P);
  if (S > c.max_position_embeddings)
    input_error("--generate {}: {} tokens in all, more than the model's {} positions", n, S, c.max_position_embeddings);
  Tensor ids(DType::i64, {B, S}), mask(DType::u8, {B, S});
  std::memset(ids.raw(), 0, ids.nbytes());  // placeholders, each written before its step reads it
  std::memset(mask.raw(), 1, mask.nbytes());
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(ids.data<std::int64_t>() + b * S, prompts.ids.data<std::int64_t>() + b * P,
                static_cast<std::size_t>(P) * sizeof(std::int64_t));
  Batch batch = Batch::make(ids, mask, c.vocab_size, "--generate");
  const Schedule schedule = Schedule::make(batch, n, chunks, "--generate/--prefill-chunks");
  refcpu::RefCpuBackend ref;
  RunContext ctx{c, weights, batch};
  const std::vector<Stage> stages = build_stages(c);
  std::int64_t* out = batch.ids.data<std::int64_t>();  // the batch the steps read their tokens from
  execute_steps(stages, schedule, [&](const Stage&) -> Backend& { return ref; }, ctx, {},
                [&](const ScheduleStep& st, std::size_t, std::size_t, const TensorMap& step) {
                  // A chunk ending inside the prompt predicts a prompt token: nothing to choose; the
                  // last step's prediction lies beyond the case.
                  if (st.end < P || st.end >= S) return;
                  const Tensor& logits = step.at("lm_head/logits");  // [B, T, V]
                  const std::int64_t T = logits.dim(1), V = logits.dim(2);
                  for (std::int64_t b = 0; b < B; ++b) {
                    const double* row = logits.data<double>() + (b * T + T - 1) * V;
                    std::int64_t best = 0;
                    for (std::int64_t v = 1; v < V; ++v)
                      if (row[v] > row[best]) best = v;
                    out[b * S + st.end] = best;
                  }
                  if (on_token) on_token(st.end - P + 1, n);
                });
  return batch.ids;
}

}  // namespace tdiff
