#include "bisect/bisect.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bisect/isolate.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "diff/expected.h"

namespace tdiff {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_exact(const TensorDiff& d) { return d.kind == TensorKind::exact || d.kind == TensorKind::routing; }

double error_of(const TensorDiff& d) { return WatchedError::error_of(d); }

// a / b where b is a floor: 0 when both are 0, +inf when only b is.
double ratio(double a, double b) {
  if (b > 0) return a / b;
  return a > 0 ? kInf : 0.0;
}

std::string threshold_names(const ThresholdPolicy& p, const std::string& key) {
  std::string s;
  for (const auto& r : p.rules)
    if (r.origin == "the noise floor" && r.patterns.front() == key)
      for (const auto& [k, v] : r.values) s += (s.empty() ? "" : ", ") + k;
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> relax_for_floor(ThresholdPolicy& policy, const CompareResult& floor) {
  std::vector<std::string> keys;
  std::vector<ThresholdRule> rules;
  for (const auto& row : floor.rows) {
    const Thresholds t = policy.for_tensor(row.stage, row.tensor);
    const TensorMetrics& m = row.metrics;
    // The gate allows floor_k x the floor's error, so a threshold that an error floor_k times
    // the floor's would cross cannot tell a fault from noise the gate accepts: off. Errors that
    // enter a metric squared (1 - cosine, KL) scale by floor_k^2. (A threshold the floor passes
    // by less than that margin would otherwise decide on bf16 noise: on the trained profile the
    // floor's logits sit at cosine 0.998, and a fault at 2.5x the floor's rmse crossed 0.99 on
    // some splits and not on others.)
    const double k = t.floor_k, k2 = k * k;
    ThresholdRule rule;
    rule.patterns = {row.key()};
    rule.origin = "the noise floor";
    if (is_exact(row)) {
      const double share = error_of(row);
      if (k * share > t.mismatch_fail) rule.values.emplace_back("mismatch_fail", k * share);
      if (k * share > t.mismatch_warn) rule.values.emplace_back("mismatch_warn", k * share);
    } else {
      const double max_abs = judged_max_abs(m, t);
      if (1 - k2 * (1 - m.cosine) < t.cosine_fail) rule.values.emplace_back("cosine_fail", -1.0);
      if (k * max_abs >= t.max_abs_fail) rule.values.emplace_back("max_abs_fail", kInf);
      if (k * m.rel_l2 >= t.rel_l2_fail) rule.values.emplace_back("rel_l2_fail", kInf);
      if (1 - k2 * (1 - m.cosine) < t.cosine_warn) rule.values.emplace_back("cosine_warn", -1.0);
      if (k * max_abs >= t.max_abs_warn) rule.values.emplace_back("max_abs_warn", kInf);
      if (k * m.rel_l2 >= t.rel_l2_warn) rule.values.emplace_back("rel_l2_warn", kInf);
      const double ratio = row.expected ? expected_ratio(m, *row.expected) : 0.0;
      if (k * ratio > t.expected_fail) rule.values.emplace_back("expected_fail", kInf);
      if (k * ratio > t.expected_warn) rule.values.emplace_back("expected_warn", kInf);
      if (row.logits && 1 - k * (1 - row.logits->top1_agree) < t.top1_fail) rule.values.emplace_back("top1_fail", 0.0);
      if (row.logits && k2 * row.logits->kl_max >= t.kl_fail) rule.values.emplace_back("kl_fail", kInf);
      if (row.logits && k2 * row.logits->kl_max >= t.kl_warn) rule.values.emplace_back("kl_warn", kInf);
    }
    if (rule.values.empty()) continue;
    keys.push_back(row.key());
    rules.push_back(std::move(rule));
  }
  for (auto& r : rules) policy.rules.push_back(std::move(r));
  return keys;
}

Watch resolve_watch(const std::vector<Stage>& stages, const std::string& spec) {
  const std::string s = spec.empty() || spec == "logits" ? "lm_head/logits" : spec;
  const auto slash = s.find('/');
  Watch w;
  w.stage = s.substr(0, slash);
  w.tensor = slash == std::string::npos ? "" : s.substr(slash + 1);
  const auto it = std::find_if(stages.begin(), stages.end(), [&](const Stage& st) { return st.name == w.stage; });
  if (it == stages.end())
    input_error("--watch: unknown stage '{}' (give 'logits', a stage such as {} or {}, or STAGE/tensor; "
                "`tdiff info CASE --stages` lists them)",
                w.stage, stages.front().name, stages.size() > 40 ? stages[40].name : stages.back().name);
  w.index = static_cast<std::size_t>(it - stages.begin());
  if (!w.tensor.empty() && std::find(it->outputs.begin(), it->outputs.end(), w.tensor) == it->outputs.end())
    input_error("--watch: stage {} has no tensor '{}' (its outputs: {})", w.stage, w.tensor, fmt::join(it->outputs, ", "));
  return w;
}

Bisector::Bisector(CaseSession& session, Backend& candidate, Backend& reference, RunContext& ctx, BisectOptions opt)
    : session_(session), candidate_(candidate), reference_(reference), ctx_(ctx), opt_(std::move(opt)),
      watch_(resolve_watch(session.stages, opt_.watch)), thresholds_(opt_.thresholds),
      cache_(session.stages, opt_.cache_bytes), floor_cache_(session.stages, opt_.cache_bytes) {
  const Stage& s = session_.stages[watch_.index];
  for (const auto& t : s.outputs)
    if ((watch_.tensor.empty() || t == watch_.tensor) && !session_.reference().has(s.name, t))
      input_error("{}: the watched tensor {}/{} has no reference (run `tdiff golden {}`)", session_.path, s.name, t,
                  session_.path);
}

void Bisector::say(const std::string& what, std::size_t done, std::size_t total) const {
  if (opt_.on_progress) opt_.on_progress(what, done, total);
}

void Bisector::set_floor(Backend& floor) {
  floor_backend_ = &floor;
  floor_.reset();
}

const CompareResult* Bisector::floor_diff() {
  ensure_floor();
  return floor_ ? &*floor_ : nullptr;
}

MixedRunResult Bisector::run_split(Backend& backend, StageCache& cache, const std::vector<bool>& on_candidate,
                                   bool compare_all, Outputs& watched) {
  MixedRunOptions mo;
  mo.end = stage_count();
  mo.cache = &cache;
  // The candidate's splits with the floor after them: the floor's outputs are not the
  // reference's, so nothing is read from /reference in their place.
  const bool floor_after = &backend == &candidate_ && floor_suffix();
  mo.reuse_reference = !floor_after;
  if (floor_after) mo.rest_phase = kPhaseFloor;
  mo.compare = compare_all ? "" : watch_.stage;
  mo.replay_selections = opt_.replay_selections;
  mo.end_to_end = true;  // the watched output's question: does the whole path stay within its formats?
  mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) {
    if (s.name != watch_.stage) return;
    for (std::size_t k = 0; k < out.size(); ++k)
      if (watch_.tensor.empty() || s.outputs[k] == watch_.tensor) watched[s.name + "/" + s.outputs[k]] = out[k];
  };
  MixedRunResult r = run_mixed(session_, backend, floor_after ? *floor_backend_ : reference_, on_candidate, ctx_, mo);
  step_times_.add(r.times, &backend == &candidate_ ? "" : "floor ");
  totals_.computed += r.on_candidate + r.on_reference - r.reused - r.cached;
  totals_.reused += r.reused;
  totals_.cached += r.cached;
  totals_.seconds += r.seconds;
  return r;
}

void Bisector::ensure_floor() {
  if (!floor_backend_ || floor_) return;
  say("all-floor run", 0, 0);
  MixedRunResult r = run_split(*floor_backend_, floor_cache_, prefix_assignment(stage_count(), {}), true, floor_watched_);
  ++totals_.floor_runs;
  judge(r.diff, opt_.thresholds);
  const auto relaxed = relax_for_floor(thresholds_, r.diff);
  std::size_t watched = 0;
  for (const auto& key : relaxed)
    if (floor_watched_.count(key)) {
      ++watched;
      notes_.push_back(fmt::format("the all-floor run fails {} on {} (or would at floor_k x its error): off there, the "
                                   "floor gate judges",
                                   threshold_names(thresholds_, key), key));
    }
  if (relaxed.size() > watched)
    notes_.push_back(fmt::format("the all-floor run fails (or at floor_k x its error would fail) absolute thresholds on "
                                 "{} other tensors; the run report judges "
                                 "those by the floor gate instead",
                                 relaxed.size() - watched));
  floor_ = std::move(r.diff);
}

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}
const TensorDiff* find_row(const CompareResult& r, const std::string& key) {
  for (const auto& row : r.rows)
    if (row.key() == key) return &row;
  return nullptr;
}
}  // namespace

WatchedError Bisector::judge_watched(CompareResult& diff, const Outputs& outputs, const CompareResult* companion,
                                     const Outputs* companion_outputs) {
  auto timed = step_times_.measure("judge");
  bool identical = companion_outputs != nullptr;
  if (companion)
    for (const auto& [key, t] : outputs) identical = identical && same_bits(t, companion_outputs->at(key));
  if (companion) {
    // The floor to judge against: the companion when the candidate equals it, else the
    // smaller error of the companion and the all-floor run, per watched tensor.
    CompareResult base;
    for (const auto& [key, t] : outputs) {
      const TensorDiff* c = find_row(*companion, key);
      const TensorDiff* f = find_row(*floor_, key);
      if (!c || !f) throw std::logic_error("bisect: no floor row for " + key);
      base.rows.push_back(identical || error_of(*c) <= error_of(*f) ? *c : *f);
    }
    ThresholdPolicy t = opt_.thresholds;
    relax_for_floor(t, base);
    if (floor_suffix())  // the expected errors model an exact suffix; the floor's is not (bisect.h)
      for (const auto& [key, out] : outputs)
        t.rules.push_back({{key}, {{"expected_fail", kInf}, {"expected_warn", kInf}}, "the floor suffix"});
    judge(diff, t, &base);
  } else {
    judge(diff, opt_.thresholds);
  }
  std::optional<WatchedError> best;
  for (const auto& row : diff.rows) {
    if (!watch_.matches(row)) continue;
    WatchedError w;
    w.diff = row;
    if (companion) {
      w.has_floor = true;
      w.identical = identical;
      w.companion_error = error_of(*find_row(*companion, row.key()));
      w.floor_error = error_of(*find_row(*floor_, row.key()));
    }
    if (!best || w.diff.verdict > best->diff.verdict ||
        (w.diff.verdict == best->diff.verdict && w.vs_floor() > best->vs_floor()))
      best = std::move(w);
  }
  if (!best) throw std::logic_error("bisect: the watched tensor " + watch_.key() + " was not compared");
  return *best;
}

std::vector<bool> Bisector::prefix_assignment(std::size_t prefix, const std::vector<std::size_t>& pinned) const {
  std::vector<bool> a(session_.stages.size(), false);
  for (std::size_t i = 0; i < prefix; ++i) a[i] = true;
  for (auto p : pinned) a[p] = false;
  return a;
}

std::string Bisector::prefix_split(std::size_t prefix, const std::vector<std::size_t>& pinned) const {
  const auto& st = session_.stages;
  std::string s = prefix == 0 ? "no stage" : fmt::format("1-{} ({} .. {})", prefix, st.front().name, st[prefix - 1].name);
  std::vector<std::string> names;
  for (auto p : pinned)
    if (p < prefix) names.push_back(st[p].name);
  if (!names.empty()) s += fmt::format(" but {}", fmt::join(names, " "));
  return s;
}

const Probe& Bisector::probe(std::string phase, const std::vector<bool>& on_candidate, std::string split,
                             std::size_t prefix, std::vector<std::size_t> pinned, std::string group, bool compare_all) {
  step_times_ = PhaseTimes();
  ensure_floor();
  say(fmt::format("step {} {}: {}", trace_.size() + 1, phase, split), 0, 0);
  const double t0 = totals_.seconds;
  Outputs outputs;
  MixedRunResult r = run_split(candidate_, cache_, on_candidate, compare_all, outputs);
  ++totals_.mixed_runs;
  Probe p;
  p.step = static_cast<int>(trace_.size()) + 1;
  p.phase = std::move(phase);
  p.prefix = prefix;
  p.pinned = std::move(pinned);
  p.group = std::move(group);
  p.split = std::move(split);
  p.on_candidate = r.on_candidate;
  p.reused = r.reused;
  p.cached = r.cached;
  p.computed = r.on_candidate + r.on_reference - r.reused - r.cached;
  if (floor_backend_) {
    // The all-candidate split's companion is the all-floor run itself, and so is every
    // split's with the floor as the suffix.
    const std::vector<bool> all = prefix_assignment(stage_count(), {});
    if (floor_suffix() ||
        std::equal(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(stage_count()), on_candidate.begin())) {
      p.watched = judge_watched(r.diff, outputs, &*floor_, &floor_watched_);
    } else {
      Outputs companion;
      MixedRunResult c = run_split(*floor_backend_, floor_cache_, on_candidate, false, companion);
      ++totals_.floor_runs;
      p.watched = judge_watched(r.diff, outputs, &c.diff, &companion);
    }
  } else {
    p.watched = judge_watched(r.diff, outputs, nullptr, nullptr);
  }
  p.seconds = totals_.seconds - t0;
  p.times = step_times_;
  if (compare_all) full_ = std::move(r.diff);
  trace_.push_back(std::move(p));
  if (opt_.on_probe) opt_.on_probe(trace_.back());
  return trace_.back();
}

const CompareResult& Bisector::full_run() {
  if (!full_) {
    const std::size_t n = stage_count();
    probe("full", prefix_assignment(n, {}), prefix_split(n, {}), n, {}, "", true);
  }
  return *full_;
}

SearchResult Bisector::search() {
  full_run();
  const std::size_t n = stage_count();
  const auto full = std::find_if(trace_.begin(), trace_.end(), [](const Probe& p) { return p.phase == "full"; });
  SearchResult res;
  res.full_fails = full->verdict() == Verdict::fail;
  if (!res.full_fails) return res;

  // Invariant: prefix `lo` passes (0: the reference itself), prefix `hi` fails, both with `pinned`.
  std::vector<std::size_t> pinned;
  std::size_t lo = 0;
  int lo_step = 0, hi_step = full->step;
  for (;;) {
    std::size_t hi = n;
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      const Probe& p = probe("search", prefix_assignment(mid, pinned), prefix_split(mid, pinned), mid, pinned);
      if (p.verdict() == Verdict::fail) hi = mid, hi_step = p.step;
      else lo = mid, lo_step = p.step;
    }
    const Stage& s = session_.stages[hi - 1];
    res.culprits.push_back({hi - 1, s.name, s.op_class, lo_step, hi_step});
    pinned.push_back(hi - 1);
    const Probe& v = probe("verify", prefix_assignment(n, pinned), prefix_split(n, pinned), n, pinned);
    if (v.verdict() != Verdict::fail) {
      res.passes_after = true;
      break;
    }
    if (res.culprits.size() >= opt_.max_culprits) {
      res.capped = true;
      break;
    }
    // Prefix `hi` with stage hi-1 pinned is prefix hi-1 without it: the last PASS.
    lo = hi;
    hi_step = v.step;
    if (lo >= n) {
      notes_.push_back("the candidate fails with every stage up to the watched one pinned but one: is it deterministic?");
      break;
    }
  }
  return res;
}

IsolationResult Bisector::isolate() {
  const auto t0 = std::chrono::steady_clock::now();
  IsolationResult res;
  CompareResult floor;
  CompareOptions copt;
  for (const auto& s : session_.stages) copt.stage_order.push_back(s.name);
  res.diff.label_ref = session_.path + ":/reference";
  res.diff.label_cand = candidate_.name() + " (isolated stages)";
  res.diff.locator = std::make_shared<const Locator>(session_.stages, session_.info.config, session_.info.batch);
  for (std::size_t i = 0; i < stage_count(); ++i) {
    const Stage& s = session_.stages[i];
    if (!session_.reference().has_stage(s.name)) continue;
    say(s.name, i + 1, stage_count());
    const std::vector<Tensor> in = reference_inputs(session_, s);
    std::vector<const Tensor*> ptrs;
    for (const auto& t : in) ptrs.push_back(&t);
    std::vector<bool> alone(stage_count(), false);  // this stage on the candidate, on the reference's inputs
    alone[i] = true;
    candidate_.assign(alone);
    const std::vector<Tensor> out = candidate_.run(s, ptrs, ctx_);
    std::vector<Tensor> out_floor;
    if (floor_backend_) out_floor = floor_backend_->run(s, ptrs, ctx_);
    // hip copies its outputs to the host asynchronously: they are read after finish(), and
    // nothing later reads this stage's device tensors.
    for (Backend* b : {&candidate_, floor_backend_}) {
      if (!b) continue;
      if (b->deferred_outputs()) b->finish();
      for (const auto& t : s.inputs) b->release(t.key());
      for (const auto& t : s.outputs) b->release(s.name + "/" + t);
    }
    ++totals_.isolated_runs;
    const Tensor* scores = s.kind == OpKind::idx_topk ? &in.front() : nullptr;  // idx.topk reads idx.score first
    for (std::size_t k = 0; k < out.size(); ++k) {
      const Tensor ref = session_.reference().get_shared(s.name, s.outputs[k]);
      const std::string key = s.name + "/" + s.outputs[k];
      res.diff.rows.push_back(diff_tensor(key, ref, out[k], copt, scores));
      if (floor_backend_) floor.rows.push_back(diff_tensor(key, ref, out_floor[k], copt, scores));
    }
  }
  if (const Policy* policy = candidate_.policy())
    set_expected(res.diff, {&session_, policy, StageInputs::reference, nullptr});
  if (floor_backend_ && floor_backend_->policy())
    set_expected(floor, {&session_, floor_backend_->policy(), StageInputs::reference, nullptr});
  ThresholdPolicy local = opt_.thresholds;
  if (floor_backend_) relax_for_floor(local, floor);
  judge(res.diff, local, floor_backend_ ? &floor : nullptr);

  std::map<std::string, const TensorDiff*> floor_rows;
  for (const auto& row : floor.rows) floor_rows[row.key()] = &row;
  for (std::size_t i = 0; i < stage_count(); ++i) {
    const Stage& s = session_.stages[i];
    std::optional<IsolatedStage> best;
    for (const auto& row : res.diff.rows) {
      if (row.stage != s.name) continue;
      IsolatedStage e{i, s.name, s.op_class, row, std::nullopt, 0.0};
      if (floor_backend_) {
        e.floor_error = error_of(*floor_rows.at(row.key()));
        e.score = error_of(row) == *e.floor_error ? 1.0 : ratio(error_of(row), *e.floor_error);
      } else {
        e.score = is_exact(row) ? error_of(row) : row.metrics.rel_l2;
      }
      if (!best || row.verdict > best->worst.verdict || (row.verdict == best->worst.verdict && e.score > best->score))
        best = std::move(e);
    }
    if (best) res.ranked.push_back(std::move(*best));
  }
  std::stable_sort(res.ranked.begin(), res.ranked.end(), [](const IsolatedStage& a, const IsolatedStage& b) {
    if (a.worst.verdict != b.worst.verdict) return a.worst.verdict > b.worst.verdict;
    return a.score > b.score;
  });
  res.seconds = seconds_since(t0);
  totals_.seconds += res.seconds;
  return res;
}

AttributionResult Bisector::attribute(Grouping by) {
  full_run();
  AttributionResult res;
  res.by = by;
  const auto full = std::find_if(trace_.begin(), trace_.end(), [](const Probe& p) { return p.phase == "full"; });
  res.all_error = error_of(full->watched.diff);
  std::vector<std::pair<std::string, std::vector<std::size_t>>> groups;  // first appearance order
  for (std::size_t i = 0; i < stage_count(); ++i) {
    const Stage& s = session_.stages[i];
    const std::string g = by == Grouping::stage_class ? s.op_class : op_kind_name(s.kind);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == g; });
    if (it == groups.end()) groups.push_back({g, {i}});
    else it->second.push_back(i);
  }
  double sum = 0;
  for (const auto& [g, idx] : groups) {
    std::vector<bool> a(session_.stages.size(), false);
    for (auto i : idx) a[i] = true;
    const Probe& p = probe("class", a, fmt::format("{} only ({} stage{})", g, idx.size(), idx.size() == 1 ? "" : "s"), 0, {}, g);
    ClassShare c;
    c.group = g;
    c.stages = idx.size();
    c.step = p.step;
    c.watched = p.watched;
    const double e = error_of(p.watched.diff);
    c.vs_all = ratio(e, res.all_error);
    sum += e * e;
    res.rows.push_back(std::move(c));
  }
  for (auto& c : res.rows) c.share = sum > 0 ? c.watched.error() * c.watched.error() / sum : 0.0;
  res.quadrature = ratio(std::sqrt(sum), res.all_error);
  std::stable_sort(res.rows.begin(), res.rows.end(), [](const ClassShare& a, const ClassShare& b) { return a.share > b.share; });
  return res;
}

}  // namespace tdiff
