#include "exec/prefill_vs_decode.h"

#include <algorithm>
#include <cmath>

#include "backend/executor.h"
#include "base/error.h"
#include "exec/generation_cache.h"
#include "exec/step_run.h"

namespace tdiff {

PrefillVsDecode prefill_vs_decode(CaseSession& session, Backend& candidate) {
  const Schedule& schedule = session.info.schedule;
  if (!schedule.generation())
    input_error("{}: --p-vs-d needs a generation case (tdiff case new --decode or --generate)", session.path);
  if (!candidate.runs_steps())
    input_error("--p-vs-d: {} runs a generation case as one prefill only (emu and refcpu run steps)", candidate.name());
  const std::string key = "lm_head/logits";
  const auto on = [&](const Stage&) -> Backend& { return candidate; };
  Tensor prefill, stepped;
  {
    RunContext ctx = session.context();
    TensorMap env;
    put_inputs(session.info.batch, env);
    ExecutorHooks hooks;
    hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& out) {
      for (std::size_t k = 0; k < out.size(); ++k)
        if (s.name + "/" + s.outputs[k] == key) prefill = out[k];
    };
    execute(session.stages, on, ctx, env, hooks);
  }
  PrefillVsDecode r;
  {
    RunContext ctx = session.context();
    execute_steps(session.stages, schedule, on, ctx, {},
                  [&](const ScheduleStep&, std::size_t, std::size_t n, const TensorMap& step) {
                    stepped = concat_dim1(stepped, step.at(key));
                    r.steps = n;
                  });
  }
  const std::int64_t S = session.info.batch.seq(), first = schedule.prompt - 1;
  const Tensor a = rows_of_dim1(prefill, first, S), b = rows_of_dim1(stepped, first, S);
  r.tensor = key;
  r.rows = a.dim(0) * a.dim(1);
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    diff = std::max(diff, std::abs(x - y));
    scale = std::max(scale, std::abs(x));
    r.differing += x != y;
  }
  r.max_rel = scale > 0 ? diff / scale : diff;
  r.logits = logits_metrics(a, b);
  return r;
}

}  // namespace tdiff
