#include "exec/step_run.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/generation_cache.h"

namespace tdiff {

namespace {

// What a stage does in a step (exec/step_run.h).
enum class StepRole { per_token, window_mask, attention, pool, entries };

struct StagePlan {
  StepRole role = StepRole::per_token;
  std::string pool;                                    // pool and entries: the compressor's pool stage
  std::map<std::size_t, std::string> cached_entries;  // input -> pool whose cached entries it reads
};

// Classifies the stages from the graph: a pool starts a compressor's entries, the norm and
// entry_rope that read them are its entry stages, and whoever reads an entry_rope's output
// reads the cache's entries.
std::vector<StagePlan> plan_stages(const std::vector<Stage>& stages) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < stages.size(); ++i) index[stages[i].name] = i;
  std::vector<StagePlan> plan(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    StagePlan& p = plan[i];
    if (s.kind == OpKind::window_mask) p.role = StepRole::window_mask;
    if (s.kind == OpKind::attention) p.role = StepRole::attention;
    if (s.kind == OpKind::pool) {
      p.role = StepRole::pool;
      p.pool = s.name;
    }
    for (std::size_t k = 0; k < s.inputs.size(); ++k) {
      const auto it = index.find(s.inputs[k].stage);
      if (it == index.end()) continue;
      const Stage& from = stages[it->second];
      const StagePlan& fp = plan[it->second];
      const bool from_entries = fp.role == StepRole::pool || fp.role == StepRole::entries;
      if (from_entries && from.kind == OpKind::entry_rope) p.cached_entries[k] = fp.pool;
      else if (from_entries && k == 0 && (s.kind == OpKind::rms_norm || s.kind == OpKind::entry_rope)) {
        p.role = StepRole::entries;
        p.pool = fp.pool;
      }
    }
  }
  return plan;
}

// The batch a step's stages see: T tokens from `first` (their ids when `ids`, else zeros) at
// their absolute positions, every row `length` long so far (what idx_score, idx_topk and
// cmp_mask count entries by).
Batch step_batch(const Batch& full, std::int64_t first, std::int64_t T, std::int64_t length, bool ids) {
  Batch b;
  const auto B = full.rows();
  b.ids = ids ? rows_of_dim1(full.ids, first, first + T) : Tensor(DType::i64, {B, T});
  if (!ids) std::memset(b.ids.raw(), 0, b.ids.nbytes());
  b.mask = Tensor(DType::u8, {B, T});
  std::memset(b.mask.raw(), 1, b.mask.nbytes());
  b.pos = Tensor(DType::i64, {B, T});
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t t = 0; t < T; ++t) b.pos.data<std::int64_t>()[r * T + t] = first + t;
  b.start.assign(static_cast<std::size_t>(B), 0);
  b.length.assign(static_cast<std::size_t>(B), length);
  return b;
}

// Columns [0, k) of the last dimension of a [B, T, K] tensor (K >= k).
Tensor first_columns(const Tensor& t, std::int64_t k) {
  const auto rows = t.dim(0) * t.dim(1), K = t.dim(2);
  const std::size_t e = dtype_size(t.dtype());
  Tensor out(t.dtype(), {t.dim(0), t.dim(1), k});
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(out.raw() + static_cast<std::size_t>(r * k) * e, t.raw() + static_cast<std::size_t>(r * K) * e,
                static_cast<std::size_t>(k) * e);
  return out;
}

// Rows b·S + [begin, end) of a [B·S, ...] tensor, as [B·T, ...].
Tensor flat_rows(const Tensor& t, std::int64_t B, std::int64_t begin, std::int64_t end) {
  Shape shape = t.shape();
  const auto S = shape[0] / B, T = end - begin;
  shape[0] = B * T;
  Tensor out(t.dtype(), shape);
  const std::size_t rb = t.nbytes() / static_cast<std::size_t>(t.dim(0));
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(out.raw() + static_cast<std::size_t>(b * T) * rb, t.raw() + static_cast<std::size_t>(b * S + begin) * rb,
                static_cast<std::size_t>(T) * rb);
  return out;
}

// A tensor of `shape` filled as a prefill fills what a query cannot see: −∞ scores, no
// visibility, −1 picks.
Tensor filled(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  if (dtype == DType::f64) std::fill_n(t.data<double>(), t.numel(), -INFINITY);
  else if (dtype == DType::f32) std::fill_n(t.data<float>(), t.numel(), -INFINITY);
  else if (dtype == DType::i64) std::fill_n(t.data<std::int64_t>(), t.numel(), std::int64_t{-1});
  else std::memset(t.raw(), 0, t.nbytes());
  return t;
}

}  // namespace

namespace {

class StepRunner {
 public:
  StepRunner(const std::vector<Stage>& stages, const std::function<Backend&(const Stage&)>& backend_for, RunContext& ctx,
             const ExecutorHooks& hooks)
      : stages_(stages), backend_for_(backend_for), ctx_(ctx), hooks_(hooks), plan_(plan_stages(stages)),
        cache_(ctx.batch.rows(), ctx.config.sliding_window), parts_(stages.size()), replacements_(stages.size()) {}

  // The step's tensors, kept until the next step (what OnStep is shown).
  const TensorMap& run_step(const ScheduleStep& st) {
    cache_.begin_step(st.begin, st.end, st.decode);
    key_positions_.push_back(cache_.key_positions());
    steps_.push_back(st);
    const Batch batch = step_batch(ctx_.batch, st.begin, st.end - st.begin, st.end, true);
    TensorMap& env = env_;
    env.clear();
    put_inputs(batch, env);
    std::set<Backend*> used;
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      Backend& backend = backend_for_(stages_[i]);
      used.insert(&backend);
      run_stage(i, backend, batch, env);
    }
    for (Backend* b : used) b->finish();
    cache_.end_step();
    return env;
  }

  // Every stage's step outputs in the prefill's layout, to on_stage in stage order.
  void deliver() {
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      std::vector<Tensor> out;
      for (std::size_t k = 0; k < stages_[i].outputs.size(); ++k) out.push_back(assemble(i, k));
      parts_[i].clear();
      if (hooks_.on_stage) hooks_.on_stage(stages_[i], i, out);
    }
  }

 private:
  void run_stage(std::size_t i, Backend& backend, const Batch& batch, TensorMap& env) {
    const Stage& s = stages_[i];
    const StagePlan& p = plan_[i];
    std::vector<const Tensor*> in;
    for (std::size_t k = 0; k < s.inputs.size(); ++k) {
      const auto c = p.cached_entries.find(k);
      if (c != p.cached_entries.end()) {
        in.push_back(&cache_.entries(c->second));
        continue;
      }
      const auto it = env.find(s.inputs[k].key());
      if (it == env.end()) throw std::logic_error(fmt::format("step: stage {} input {} was not computed", s.name, s.inputs[k].key()));
      in.push_back(&it->second);
    }
    RunContext ctx{ctx_.config, ctx_.weights, batch, ctx_.tie_rule};
    std::vector<Tensor> out;
    if (p.role == StepRole::window_mask) {
      out = {cache_.window_visibility()};
    } else if (p.role == StepRole::attention) {
      const Tensor keys = cache_.window_keys(s.layer, *in[1]);
      in[1] = &keys;
      out = backend.run(s, in, ctx);
    } else if (p.role == StepRole::pool) {
      out = run_pool(s, backend, *in[0], *in[1]);
    } else if (p.role == StepRole::entries && in[0]->dim(1) == 0) {
      out = {Tensor(DType::f64, in[0]->shape())};  // no window finished in this step
    } else {
      if (p.role == StepRole::entries) ctx.first_entry = cache_.entries_before(p.pool);
      out = backend.run(s, in, ctx);
    }
    if (p.role == StepRole::entries && s.kind == OpKind::entry_rope) cache_.add_entries(p.pool, out.at(0));
    if (out.size() != s.outputs.size())
      throw std::logic_error(fmt::format("stage {}: backend returned {} outputs, expected {}", s.name, out.size(), s.outputs.size()));
    const std::optional<std::vector<Tensor>> replaced = replacement(i, out);
    for (std::size_t k = 0; k < out.size(); ++k) env[s.name + "/" + s.outputs[k]] = replaced ? (*replaced)[k] : out[k];
    if (hooks_.on_stage) parts_[i].push_back(std::move(out));
  }

  // The compressor's cached rows and the step's, pooled from their window start; the new entries.
  std::vector<Tensor> run_pool(const Stage& s, Backend& backend, const Tensor& P, const Tensor& Z) {
    const GenerationCache::PoolSpan span = cache_.pool_span(s.name, P, Z);
    const auto rows = span.P.dim(1);
    const Batch batch = step_batch(ctx_.batch, span.first_position, rows, rows, false);
    RunContext ctx{ctx_.config, ctx_.weights, batch, ctx_.tie_rule};
    const std::vector<const Tensor*> in = {&span.P, &span.Z, &batch.mask};
    std::vector<Tensor> out = backend.run(s, in, ctx);
    out.at(0) = cache_.pooled(s.name, s.rate, s.overlap, out.at(0));
    return out;
  }

  // Selection replay: the reference's picks of the step's positions (asked once per stage).
  std::optional<std::vector<Tensor>> replacement(std::size_t i, const std::vector<Tensor>& out) {
    const Stage& s = stages_[i];
    if (!hooks_.replace || !op_info(s.kind).selection) return std::nullopt;
    auto& full = replacements_[i];
    if (!full) {
      std::vector<Tensor> r;
      full = hooks_.replace(s, i, r) ? std::optional(std::move(r)) : std::optional(std::vector<Tensor>{});
    }
    if (full->empty()) return std::nullopt;
    const ScheduleStep& st = steps_.back();
    std::vector<Tensor> step;
    for (std::size_t k = 0; k < full->size(); ++k) {
      const Tensor& f = (*full)[k];
      if (op_info(s.kind).layout == RowLayout::flat_tokens) step.push_back(flat_rows(f, ctx_.batch.rows(), st.begin, st.end));
      else step.push_back(first_columns(rows_of_dim1(f, st.begin, st.end), out[k].dim(2)));
    }
    return step;
  }

  Tensor assemble(std::size_t i, std::size_t k) const;

  const std::vector<Stage>& stages_;
  const std::function<Backend&(const Stage&)>& backend_for_;
  RunContext& ctx_;
  const ExecutorHooks& hooks_;
  std::vector<StagePlan> plan_;
  GenerationCache cache_;
  TensorMap env_;  // the current step's tensors
  std::vector<ScheduleStep> steps_;
  std::vector<std::vector<std::int64_t>> key_positions_;      // per step
  std::vector<std::vector<std::vector<Tensor>>> parts_;        // stage -> step -> outputs
  std::vector<std::optional<std::vector<Tensor>>> replacements_;  // stage -> the reference's picks (empty: none)
};

// Output k of stage i over the whole sequence, laid out as a prefill lays it out.
Tensor StepRunner::assemble(std::size_t i, std::size_t k) const {
  const Stage& s = stages_[i];
  const auto& parts = parts_[i];
  const auto B = ctx_.batch.rows(), S = ctx_.batch.seq();
  const RowLayout layout = plan_[i].role == StepRole::entries ? RowLayout::entries : op_info(s.kind).layout;
  if (layout == RowLayout::tokens || layout == RowLayout::entries) {  // rows (or entries) in step order
    Tensor all;
    for (const auto& p : parts) all = concat_dim1(all, p[k]);
    return all;
  }
  const Tensor& first = parts.at(0)[k];
  if (layout == RowLayout::flat_tokens) {
    Shape shape = first.shape();
    shape[0] = B * S;
    Tensor all(first.dtype(), shape);
    const std::size_t rb = first.nbytes() / static_cast<std::size_t>(first.dim(0));
    for (std::size_t j = 0; j < parts.size(); ++j) {
      const auto begin = steps_[j].begin, T = steps_[j].end - begin;
      for (std::int64_t b = 0; b < B; ++b)
        std::memcpy(all.raw() + static_cast<std::size_t>(b * S + begin) * rb,
                    parts[j][k].raw() + static_cast<std::size_t>(b * T) * rb, static_cast<std::size_t>(T) * rb);
    }
    return all;
  }
  // [B, T, K] per step into [B, S, C]: a window mask by key position, entries and picks by column.
  const std::int64_t n_full = s.rate > 0 ? S / s.rate : 0;
  const std::int64_t C = layout == RowLayout::query_key      ? S
                         : layout == RowLayout::query_entry  ? n_full
                                                             : std::min(ctx_.config.index_topk, n_full);
  Tensor all = filled(first.dtype(), {B, S, C});
  const std::size_t e = dtype_size(first.dtype());
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const Tensor& p = parts[j][k];
    const auto begin = steps_[j].begin, T = p.dim(1), K = p.dim(2);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t c = 0; c < K; ++c) {
          const std::int64_t col = layout == RowLayout::query_key ? key_positions_[j][static_cast<std::size_t>(c)] : c;
          if (col < 0 || col >= C) continue;
          std::memcpy(all.raw() + static_cast<std::size_t>((b * S + begin + t) * C + col) * e,
                      p.raw() + static_cast<std::size_t>((b * T + t) * K + c) * e, e);
        }
  }
  return all;
}

}  // namespace

void execute_steps(const std::vector<Stage>& stages, const Schedule& schedule,
                   const std::function<Backend&(const Stage&)>& backend_for, RunContext& ctx, const ExecutorHooks& hooks,
                   const OnStep& on_step) {
  for (const Stage& s : stages)
    if (!backend_for(s).runs_steps())
      throw std::logic_error(fmt::format("stage {}: backend {} does not run generation steps", s.name, backend_for(s).name()));
  StepRunner runner(stages, backend_for, ctx, hooks);
  const std::vector<ScheduleStep> steps = schedule.steps(ctx.batch.seq());
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const TensorMap& step = runner.run_step(steps[j]);
    if (on_step) on_step(steps[j], j, steps.size(), step);
  }
  if (hooks.on_stage) runner.deliver();
}

}  // namespace tdiff
