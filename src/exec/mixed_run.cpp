#include "exec/mixed_run.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "backend/executor.h"
#include "backend/timed_backend.h"
#include "base/error.h"
#include "diff/expected.h"
#include "diff/pairing.h"
#include "diff/real_rows.h"
#include "diff/selection_scores.h"
#include "exec/followed_reference.h"
#include "exec/stage_cache.h"
#include "exec/step_run.h"
#include "model/pattern.h"
#include "numerics/policy.h"

namespace tdiff {

namespace {

// One mixed run: the executor's hooks (replay, reuse and cache, compare) over shared state.
class MixedRun {
 public:
  MixedRun(CaseSession& session, Backend& candidate, const std::vector<bool>& on_candidate, RunContext& ctx,
           const MixedRunOptions& opt, bool stepped)
      : session_(session), candidate_(candidate), on_candidate_(on_candidate), opt_(opt),
        refs_(session.reference()), from_cache_(session.stages.size(), false) {
    const auto& stages = session.stages;
    if (!opt.compare.empty()) select_stages(opt.compare, stages);
    rule_.opt = opt.diff;
    rule_.opt.stage_order.clear();
    for (const auto& s : stages) rule_.opt.stage_order.push_back(s.name);
    rule_.opt.replayed_selections = opt.replay_selections;
    rule_.opt.contract = &session.contract();
    rule_.opt.generation_rows = session.info.schedule.predicting_rows(session.info.batch.seq());
    if (stepped) rule_.opt.steps = result_.diff.steps = session.info.schedule.steps(session.info.batch.seq());
    rule_.weights = &ctx.weights;
    rule_.times = &result_.times;
    result_.diff.label_ref = session.path + ":/reference";
    result_.diff.label_cand = candidate.name();
    result_.diff.locator = std::make_shared<const Locator>(stages, session.info.config, session.info.batch);
    // Logits and selections counted on real tokens, as a dump's are (diff/real_rows.h).
    if ((result_.diff.padding_tokens = padding_tokens(session.info.batch)))
      rule_.token_rows = [&batch = session.info.batch](const Stage&, const Shape& shape) {
        return real_rows(shape, batch, 0);
      };
    // Following its own choices, the candidate is judged against the reference on its path.
    if (opt.follow_selections && !opt.replay_selections) {
      result_.diff.label_ref += ", following the candidate's selections";
      followed_ = std::make_unique<FollowedReference>(session, rule_, opt.compare, result_.diff);
    }
    for (const auto& s : stages)
      if (const std::string k = selection_scores_key(s).key; !k.empty()) score_keys_.insert(k);
  }

  ExecutorHooks hooks() {
    ExecutorHooks h;
    h.replace = [this](const Stage& s, std::size_t i, std::vector<Tensor>& out) { return replay(s, i, out); };
    h.cached = [this](const Stage& s, std::size_t i, std::vector<Tensor>& out) { return take_stored(s, i, out); };
    h.on_stage = [this](const Stage& s, std::size_t i, const std::vector<Tensor>& out) { on_stage(s, i, out); };
    return h;
  }
  MixedRunResult& result() { return result_; }

 private:
  // get(): tensors that later stages and callbacks receive; get_shared(): the compared ones.
  Tensor read_ref(const std::string& stage, const std::string& tensor, bool shared = false) {
    auto s = result_.times.measure(kPhaseReadRef);
    return shared ? refs_.get_shared(stage, tensor) : refs_.get(stage, tensor);
  }
  bool have_ref(const std::string& stage) const { return refs_.has_stage(stage); }
  bool inputs_clean(const Stage& s) const {
    for (const auto& in : s.inputs)
      if (!clean_.count(in.key())) return false;
    return true;
  }

  // Selection replay: the candidate's selection stage ran; later stages get the reference's choices.
  bool replay(const Stage& s, std::size_t i, std::vector<Tensor>& out) {
    if (!opt_.replay_selections || !on_candidate_[i] || !op_info(s.kind).selection) return false;
    if (!have_ref(s.name)) {  // a partial reference (tdiff golden --stages): this one follows its own
      result_.not_replayed.push_back(s.name);
      return false;
    }
    for (const auto& t : s.outputs) out.push_back(read_ref(s.name, t));
    ++result_.replayed;
    return true;
  }

  // A reference stage on clean inputs reads /reference; otherwise an earlier mixed run's output.
  bool take_stored(const Stage& s, std::size_t i, std::vector<Tensor>& out) {
    if (!on_candidate_[i] && inputs_clean(s) && opt_.reuse_reference && have_ref(s.name)) {
      for (const auto& t : s.outputs) out.push_back(read_ref(s.name, t));
      ++result_.reused;
      return true;
    }
    if (!opt_.cache) return false;
    // A cached stage skips the replace hook: a replayed selection is run again (it is cheap).
    if (opt_.replay_selections && on_candidate_[i] && op_info(s.kind).selection) return false;
    const std::vector<Tensor>* hit = opt_.cache->find(i, on_candidate_);
    if (!hit) return false;
    out = *hit;
    from_cache_[i] = true;
    ++result_.cached;
    return true;
  }

  void on_stage(const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    if (opt_.progress) opt_.progress(s, i);
    if (on_candidate_[i]) ++result_.on_candidate;
    else ++result_.on_reference;
    if (!on_candidate_[i] && inputs_clean(s))
      for (const auto& t : s.outputs) clean_.insert(s.name + "/" + t);
    else if (opt_.cache && !from_cache_[i])
      opt_.cache->put(i, on_candidate_, out);
    if (opt_.on_outputs) {
      auto t = result_.times.measure(kPhaseOutputs);
      opt_.on_outputs(s, out);
    }
    // The candidate's selection scores, for the routing comparison of the top-k that follows.
    for (std::size_t k = 0; k < out.size(); ++k)
      if (score_keys_.count(s.name + "/" + s.outputs[k])) cand_scores_[s.name + "/" + s.outputs[k]] = out[k];
    if (!pattern_matches(opt_.compare, s.name)) {
      if (followed_) followed_->step(i, candidate_side(s, out));  // every stage is on the path
      return;
    }
    if (!have_ref(s.name))
      input_error("{}: stage {} has no reference (run `tdiff golden {}` without --stages)", session_.path, s.name,
                  session_.path);
    if (followed_) followed_->step(i, candidate_side(s, out));
    else compare(s, out);
  }

  // The reference side reads /reference as shared tensors; the candidate's side is this stage's
  // outputs and the scores its earlier stages produced.
  void compare(const Stage& s, const std::vector<Tensor>& out) {
    const TensorSide ref{result_.diff.label_ref, session_.path + ":/reference/",
                         [&](const std::string& key, const Tensor*) {
                           const auto [stage, tensor] = split_key(key);
                           return have_ref(stage) ? read_ref(stage, tensor, true) : Tensor();
                         },
                         [&](const std::string& key) { return refs_.conditioning(key); }};
    pair_stage(s, ref, candidate_side(s, out), rule_, result_.diff);
  }

  // This stage's outputs and the scores the candidate's earlier stages produced.
  TensorSide candidate_side(const Stage& s, const std::vector<Tensor>& out) const {
    return {candidate_.name(), candidate_.name() + " ", [&s, &out, this](const std::string& key, const Tensor*) {
              for (std::size_t k = 0; k < out.size(); ++k)
                if (key == s.name + "/" + s.outputs[k]) return out[k];
              const auto it = cand_scores_.find(key);
              return it == cand_scores_.end() ? Tensor() : it->second;
            },
            nullptr};
  }

  CaseSession& session_;
  Backend& candidate_;
  const std::vector<bool>& on_candidate_;
  const MixedRunOptions& opt_;
  ReferenceStore& refs_;  // read once per session, not per mixed run
  MixedRunResult result_;
  PairingRule rule_;
  // A tensor is "clean" while it equals the reference bit for bit: produced by the reference
  // backend (deterministic) from clean inputs. Clean stages can be read from the case file.
  std::set<std::string> clean_ = {"inputs/ids", "inputs/mask", "inputs/pos"};
  std::vector<bool> from_cache_;
  std::set<std::string> score_keys_;           // the stored scores some selection stage chooses on
  std::map<std::string, Tensor> cand_scores_;  // this run's values of them
  std::unique_ptr<FollowedReference> followed_;  // free and followed: the reference on the candidate's path
};

}  // namespace

MixedRunResult run_mixed(CaseSession& session, Backend& candidate, Backend& reference,
                         const std::vector<bool>& on_candidate, RunContext& ctx, const MixedRunOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  candidate.assign(on_candidate);
  const Schedule& schedule = session.info.schedule;
  const bool stepped = schedule.generation() && !opt.as_prefill && candidate.runs_steps() && reference.runs_steps();
  MixedRun run(session, candidate, on_candidate, ctx, opt, stepped);
  MixedRunResult& result = run.result();
  PhaseTimes& times = result.times;
  TensorMap env;
  put_inputs(session.info.batch, env);
  const auto& stages = session.stages;
  const std::vector<Stage> head(stages.begin(), stages.begin() + static_cast<std::ptrdiff_t>(std::min(opt.end, stages.size())));
  TimedBackend timed_cand(candidate, times, kPhaseCandidate, kPhaseFinish),
      timed_ref(reference, times, opt.rest_phase ? opt.rest_phase : kPhaseReference, kPhaseFinish);
  const std::function<Backend&(const Stage&)> backend_for = [&](const Stage& s) -> Backend& {
    return on_candidate[static_cast<std::size_t>(&s - head.data())] ? static_cast<Backend&>(timed_cand) : timed_ref;
  };
  if (stepped) {
    execute_steps(head, schedule, backend_for, ctx, run.hooks(),
                  [&](const ScheduleStep&, std::size_t j, std::size_t n, const TensorMap&) {
                    if (opt.on_step) opt.on_step(j, n);
                  });
    result.steps = schedule.steps(session.info.batch.seq()).size();
    result.diff.label_cand += fmt::format(", {} generation steps against its cache", result.steps);
  } else {
    if (schedule.generation()) result.diff.label_cand += ", the schedule run as one prefill";
    execute(head, backend_for, ctx, env, run.hooks());
  }
  if (result.replayed) result.diff.label_cand += ", selections replayed from the reference";
  // What the candidate's formats explain, for the tolerance rule (the reference has no policy).
  if (const Policy* policy = candidate.policy()) {
    auto t = times.measure(kPhaseCompare);
    set_expected(result.diff, {&session, policy, StageInputs::run, &on_candidate, !opt.end_to_end});
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return MixedRunResult(std::move(result));
}

}  // namespace tdiff
