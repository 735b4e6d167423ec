#include "exec/timed_forward.h"

#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/sha256.h"
#include "model/pattern.h"

namespace tdiff {

namespace {

// Times each stage to its end (finish() after run()), so an asynchronous backend's seconds
// land on the stage class that spent them; the clean forwards are timed without it.
class ClassTimer final : public Backend {
 public:
  ClassTimer(Backend& b, std::map<std::string, double>& seconds) : b_(b), seconds_(seconds) {}
  std::string name() const override { return b_.name(); }
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> out = b_.run(stage, inputs, ctx);
    b_.finish();
    seconds_[stage.op_class] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  bool implements(OpKind kind) const override { return b_.implements(kind); }
  bool deferred_outputs() const override { return b_.deferred_outputs(); }
  void finish() override { b_.finish(); }
  void release(const std::string& key) override { b_.release(key); }
  std::map<std::string, std::string> environment() const override { return b_.environment(); }
  const Policy* policy() const override { return b_.policy(); }
  bool runs_steps() const override { return b_.runs_steps(); }

 private:
  Backend& b_;
  std::map<std::string, double>& seconds_;
};

MixedRunOptions forward_options(bool replay, const std::string& compare) {
  MixedRunOptions mo;
  mo.compare = compare;
  mo.replay_selections = replay;
  mo.follow_selections = false;  // the candidate computes the same either way; nothing else is compared
  return mo;
}

// The stages whose outputs are logits, as a --stages glob.
std::string logits_stages(const CaseSession& session) {
  const std::vector<std::string> patterns = CompareOptions{}.logits_patterns;
  std::vector<std::string> names;
  for (const Stage& s : session.stages)
    for (const auto& o : s.outputs)
      for (const auto& p : patterns)
        if (pattern_matches(p, s.name + "/" + o) && (names.empty() || names.back() != s.name)) names.push_back(s.name);
  return fmt::format("{}", fmt::join(names, ","));
}

}  // namespace

void LogitsHash::add(const Stage& s, const std::vector<Tensor>& out) {
  for (std::size_t k = 0; k < out.size() && k < s.outputs.size(); ++k) {
    const std::string key = s.name + "/" + s.outputs[k];
    bool logits = false;
    for (const auto& p : patterns_) logits = logits || pattern_matches(p, key);
    if (!logits) continue;
    Sha256 h;
    h.add(out[k].raw(), out[k].nbytes());
    parts_.emplace_back(key, h.hex());
  }
}

std::string LogitsHash::hex() {
  Sha256 h;
  for (const auto& [key, sum] : parts_) {
    const std::string line = fmt::format("{} {}\n", sum, key);
    h.add(line.data(), line.size());
  }
  return h.hex();
}

TimedForwards time_forwards(CaseSession& session, Backend& candidate, bool replay, int repeats,
                            const std::function<void(int, double)>& on_forward) {
  TimedForwards t;
  const std::vector<bool> all(session.stages.size(), true);
  for (int i = 0; i < repeats; ++i) {
    MixedRunOptions mo = forward_options(replay, session.stages.front().name);
    LogitsHash hash(mo.diff.logits_patterns);
    mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) { hash.add(s, out); };
    RunContext ctx = session.context();
    // Every stage on the candidate: the reference backend is never asked for one.
    MixedRunResult r = run_mixed(session, candidate, candidate, all, ctx, mo);
    t.seconds.push_back(r.times.get(kPhaseCandidate) + r.times.get(kPhaseFinish));
    if (on_forward) on_forward(i + 1, t.seconds.back());
    const std::string sum = hash.hex();
    if (i == 0) t.logits_sha256 = sum;
    else t.same_bits = t.same_bits && sum == t.logits_sha256;
  }
  if (repeats > 0) {
    ClassTimer profiled(candidate, t.class_seconds);
    MixedRunOptions mo = forward_options(replay, session.stages.front().name);
    RunContext ctx = session.context();
    run_mixed(session, profiled, profiled, all, ctx, mo);
  }
  return t;
}

CompareResult timed_logits_diff(CaseSession& session, Backend& candidate, bool replay) {
  const std::vector<bool> all(session.stages.size(), true);
  MixedRunOptions mo = forward_options(replay, logits_stages(session));
  RunContext ctx = session.context();
  return run_mixed(session, candidate, candidate, all, ctx, mo).diff;
}

}  // namespace tdiff
