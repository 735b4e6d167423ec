#include "exec/mixed_run.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "exec/selection_scores.h"
#include "exec/stage_cache.h"
#include "numerics/policy.h"
#include "diff/expected.h"
#include "base/error.h"
#include "backend/executor.h"
#include "backend/timed_backend.h"
#include "model/pattern.h"

namespace tdiff {

MixedRunResult run_mixed(CaseSession& session, Backend& candidate, Backend& reference,
                         const std::vector<bool>& on_candidate, RunContext& ctx, const MixedRunOptions& opt) {
  const auto& stages = session.stages;
  const auto t0 = std::chrono::steady_clock::now();
  MixedRunResult result;
  PhaseTimes& times = result.times;
  ReferenceStore& refs = session.reference();  // read once per session, not per mixed run
  // get(): tensors that later stages and callbacks receive; get_shared(): the compared ones.
  auto read_ref = [&](const std::string& stage, const std::string& tensor, bool shared = false) {
    auto s = times.measure(kPhaseReadRef);
    return shared ? refs.get_shared(stage, tensor) : refs.get(stage, tensor);
  };
  auto have_ref = [&](const std::string& stage) { return refs.has_stage(stage); };
  if (!opt.compare.empty()) select_stages(opt.compare, stages);

  CompareOptions copt = opt.diff;
  copt.stage_order.clear();
  for (const auto& s : stages) copt.stage_order.push_back(s.name);
  result.diff.label_ref = session.path + ":/reference";
  result.diff.label_cand = candidate.name();
  result.diff.seq = session.info.batch.seq();

  // A tensor is "clean" while it equals the reference bit for bit: produced by the reference
  // backend (deterministic) from clean inputs. Clean stages can be read from the case file.
  std::set<std::string> clean = {"inputs/ids", "inputs/mask", "inputs/pos"};
  ExecutorHooks hooks;
  std::vector<bool> from_cache(stages.size(), false);
  std::set<std::string> score_keys;           // the stored scores some selection stage chooses on
  std::map<std::string, Tensor> cand_scores;  // this run's values of them
  for (const auto& s : stages)
    if (const std::string k = selection_scores_key(s).key; !k.empty()) score_keys.insert(k);
  copt.replayed_selections = opt.replay_selections;
  hooks.replace = [&](const Stage& s, std::size_t i, std::vector<Tensor>& out) {
    if (!opt.replay_selections || !on_candidate[i] || !op_info(s.kind).selection) return false;
    if (!have_ref(s.name)) {  // a partial reference (tdiff golden --stages): this one follows its own
      result.not_replayed.push_back(s.name);
      return false;
    }
    for (const auto& t : s.outputs) out.push_back(read_ref(s.name, t));
    ++result.replayed;
    return true;
  };
  hooks.cached = [&](const Stage& s, std::size_t i, std::vector<Tensor>& out) {
    bool inputs_clean = true;
    for (const auto& in : s.inputs) inputs_clean = inputs_clean && clean.count(in.key());
    if (!on_candidate[i] && inputs_clean && opt.reuse_reference && have_ref(s.name)) {
      for (const auto& t : s.outputs) out.push_back(read_ref(s.name, t));
      ++result.reused;
      return true;
    }
    if (!opt.cache) return false;
    // A cached stage skips the replace hook: a replayed selection is run again (it is cheap).
    if (opt.replay_selections && on_candidate[i] && op_info(s.kind).selection) return false;
    const std::vector<Tensor>* hit = opt.cache->find(i, on_candidate);
    if (!hit) return false;
    out = *hit;
    from_cache[i] = true;
    ++result.cached;
    return true;
  };
  hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    if (opt.progress) opt.progress(s, i);
    if (on_candidate[i]) ++result.on_candidate;
    else ++result.on_reference;
    bool inputs_clean = !on_candidate[i];
    for (const auto& in : s.inputs) inputs_clean = inputs_clean && clean.count(in.key());
    if (inputs_clean)
      for (const auto& t : s.outputs) clean.insert(s.name + "/" + t);
    else if (opt.cache && !from_cache[i])
      opt.cache->put(i, on_candidate, out);
    if (opt.on_outputs) {
      auto t = times.measure(kPhaseOutputs);
      opt.on_outputs(s, out);
    }
    // The candidate's selection scores, for the routing comparison of the top-k that follows.
    for (std::size_t k = 0; k < out.size(); ++k)
      if (score_keys.count(s.name + "/" + s.outputs[k])) cand_scores[s.name + "/" + s.outputs[k]] = out[k];
    if (!pattern_matches(opt.compare, s.name)) return;
    if (!have_ref(s.name))
      input_error("{}: stage {} has no reference (run `tdiff golden {}` without --stages)", session.path, s.name,
                  session.path);
    const std::string chosen_on = selection_scores_key(s).key;
    Tensor scores, own_scores;
    if (!chosen_on.empty()) {
      const auto [score_stage, score_tensor] = split_key(chosen_on);
      Tensor ref_scores;
      if (have_ref(score_stage)) ref_scores = read_ref(score_stage, score_tensor, true);
      auto t = times.measure(kPhaseCompare);
      const auto cs = cand_scores.find(chosen_on);
      ChoiceScores c = choice_scores(s, ref_scores, cs == cand_scores.end() ? Tensor() : cs->second, &ctx.weights,
                                     session.path + ":/reference/" + chosen_on, candidate.name() + " " + chosen_on);
      scores = std::move(c.ref);
      own_scores = std::move(c.cand);
    }
    for (std::size_t k = 0; k < out.size(); ++k) {
      const Tensor ref = read_ref(s.name, s.outputs[k], true);
      auto t = times.measure(kPhaseCompare);
      result.diff.rows.push_back(diff_tensor(s.name + "/" + s.outputs[k], ref, out[k], copt,
                                             scores.defined() ? &scores : nullptr,
                                             own_scores.defined() ? &own_scores : nullptr));
    }
  };
  TensorMap env;
  put_inputs(session.info.batch, env);
  const std::vector<Stage> head(stages.begin(), stages.begin() + static_cast<std::ptrdiff_t>(std::min(opt.end, stages.size())));
  TimedBackend timed_cand(candidate, times, kPhaseCandidate, kPhaseFinish), timed_ref(reference, times, opt.rest_phase ? opt.rest_phase : kPhaseReference, kPhaseFinish);
  execute(head, [&](const Stage& s) -> Backend& {
    return on_candidate[static_cast<std::size_t>(&s - head.data())] ? static_cast<Backend&>(timed_cand) : timed_ref;
  }, ctx, env, hooks);
  if (result.replayed) result.diff.label_cand += ", selections replayed from the reference";
  // What the candidate's formats explain, for the tolerance rule (the reference has no policy).
  if (const Policy* policy = candidate.policy()) {
    auto t = times.measure(kPhaseCompare);
    set_expected(result.diff, {&session, policy, StageInputs::run, &on_candidate, !opt.end_to_end});
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tdiff
