#include "checks/audit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "bisect/isolate.h"
#include "exec/mixed_run.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "emu/arith.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

namespace {

bool is_selection(OpKind k) { return op_info(k).selection; }

bool touches(const std::vector<OpKind>& kinds, OpKind k) {
  return kinds.empty() || std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

std::string kind_list(const std::vector<OpKind>& kinds) {
  std::vector<std::string> names;
  for (OpKind k : kinds) names.push_back(op_kind_name(k));
  return fmt::format("{}", fmt::join(names, ", "));
}

// One stage in isolation: its outputs against the reference's.
std::vector<TensorDiff> isolated_diffs(const CaseSession& session, const Stage& s, Backend& candidate, RunContext& ctx,
                                       const InputHook& hook) {
  std::vector<Tensor> in = reference_inputs(session, s);
  std::vector<Tensor> ref;
  for (const auto& t : s.outputs) ref.push_back(session.reference().get(s.name, t));
  if (hook) hook(s, in, ref);
  std::vector<const Tensor*> ptrs;
  for (const auto& t : in) ptrs.push_back(&t);
  const std::vector<Tensor> out = candidate.run(s, ptrs, ctx);
  // hip copies its outputs to the host asynchronously: they are read after finish().
  if (candidate.deferred_outputs()) candidate.finish();
  // The indexer's top-k reads the scores it selects on: exact ties there are not mismatches.
  const Tensor* scores = s.kind == OpKind::idx_topk ? &in[0] : nullptr;
  std::vector<TensorDiff> rows;
  const CompareOptions copt;
  for (std::size_t k = 0; k < out.size(); ++k)
    rows.push_back(diff_tensor(s.name + "/" + s.outputs[k], ref[k], out[k], copt, scores));
  // No later stage reads these here: a device backend frees its copies of them.
  for (const auto& t : s.inputs) candidate.release(t.key());
  for (const auto& t : s.outputs) candidate.release(s.name + "/" + t);
  return rows;
}

// The floor of a per-tensor error in the geometric mean: far below any float32 effect, so an
// exact tensor does not send the mean to zero.
constexpr double kErrorFloor = 1e-16;

LocalError pool(std::vector<TensorDiff> rows) {
  LocalError e;
  double log_sum = 0;
  for (const auto& d : rows) {
    if (d.routing) {
      e.selection_tokens += d.routing->tokens - d.routing->equal_tokens;
      e.selection_flips += d.routing->flips;
      ++e.selection_tensors;
    } else if (d.kind == TensorKind::values || d.kind == TensorKind::logits) {
      log_sum += std::log(std::max(d.metrics.rel_l2, kErrorFloor));
      e.nonfinite += d.metrics.new_nonfinite;
      ++e.float_tensors;
    }
  }
  e.rel_l2 = e.float_tensors ? std::exp(log_sum / static_cast<double>(e.float_tensors)) : 0.0;
  e.rows = std::move(rows);
  return e;
}

std::uint64_t fingerprint(const Tensor& t) {
  const auto* p = reinterpret_cast<const unsigned char*>(t.raw());
  std::uint64_t h = arith::mix64(static_cast<std::uint64_t>(t.nbytes()));
  std::size_t i = 0;
  for (; i + 8 <= t.nbytes(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = arith::mix64(h ^ w);
  }
  for (; i < t.nbytes(); ++i) h = arith::mix64(h ^ p[i]);
  return h;
}

}  // namespace

LocalError local_error(const CaseSession& session, Backend& candidate, const std::vector<OpKind>& kinds, RunContext& ctx,
                       const InputHook& inputs) {
  std::vector<TensorDiff> rows;
  for (const Stage& s : session.stages) {
    if (!touches(kinds, s.kind) || op_info(s.kind).family == OpFamily::mask) continue;
    for (auto& d : isolated_diffs(session, s, candidate, ctx, inputs)) rows.push_back(std::move(d));
  }
  return pool(std::move(rows));
}

FullRun full_run(CaseSession& session, Backend& candidate, RunContext& ctx) {
  refcpu::RefCpuBackend reference;
  FullRun fr;
  MixedRunOptions mo;
  mo.compare = "lm_head";
  mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) {
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::string key = s.name + "/" + s.outputs[k];
      fr.fingerprint[key] = fingerprint(out[k]);
      if (is_selection(s.kind)) fr.selections[key] = out[k];
    }
  };
  const std::vector<bool> all(session.stages.size(), true);
  MixedRunResult r = run_mixed(session, candidate, reference, all, ctx, mo);
  for (auto& d : r.diff.rows)
    if (d.kind == TensorKind::logits) fr.logits = std::move(d);
  return fr;
}

RunToRun run_to_run(const FullRun& a, const FullRun& b, const std::vector<Stage>& stages) {
  RunToRun r;
  for (const Stage& s : stages)
    for (const auto& t : s.outputs) {
      const std::string key = s.name + "/" + t;
      auto ia = a.fingerprint.find(key), ib = b.fingerprint.find(key);
      if (ia == a.fingerprint.end() || ib == b.fingerprint.end()) continue;
      ++r.tensors;
      if (ia->second == ib->second) continue;
      ++r.tensors_differ;
      if (r.first_differing.empty()) r.first_differing = key;
    }
  for (const auto& [key, ta] : a.selections) {
    auto ib = b.selections.find(key);
    if (ib == b.selections.end()) continue;
    const RoutingMetrics m = routing_metrics(ta, ib->second);
    r.selection_tokens += m.tokens - m.equal_tokens;
  }
  return r;
}

double audit_factor(const AuditSide& bad, const AuditSide& good, bool selection) {
  auto ratio = [](double b, double g) {
    if (g > 0) return b / g;
    return b > 0 ? INFINITY : 1.0;
  };
  if (selection)
    return ratio(static_cast<double>(bad.local.selection_tokens), static_cast<double>(good.local.selection_tokens));
  if (bad.local.nonfinite > 0 && good.local.nonfinite == 0) return INFINITY;
  return ratio(bad.local.rel_l2, good.local.rel_l2);
}

namespace {

// The operator kinds of the model that `candidate` has no kernel for, in model order.
std::vector<OpKind> missing_kinds(const CaseSession& session, const Backend& candidate) {
  std::vector<OpKind> missing;
  for (const Stage& s : session.stages)
    if (!candidate.implements(s.kind) && std::find(missing.begin(), missing.end(), s.kind) == missing.end())
      missing.push_back(s.kind);
  return missing;
}

// The kinds the knob changes that are missing.
std::vector<OpKind> knob_kinds_missing(const KnobInfo& knob, const std::vector<OpKind>& missing) {
  std::vector<OpKind> v;
  for (OpKind k : missing)
    if (touches(knob.kinds, k)) v.push_back(k);
  return v;
}

// The runs of one audit: isolated stages (cached by stage and resolved numerics) and full
// runs of both seeds (the base policy's shared by every side whose setting is the base's).
class Auditor {
 public:
  Auditor(CaseSession& session, const Policy& base, const CandidateFactory& make_candidate, const AuditOptions& opt)
      : session_(session), base_(base), make_candidate_(make_candidate), opt_(opt), ctx_(session.context()) {}

  void say(const std::string& what) const {
    if (opt_.progress) opt_.progress(what);
  }

  // Full runs of the base policy with both seeds, shared by every row whose setting is the base's.
  void run_base() {
    if (!opt_.full_runs) return;
    say("full runs of the base policy");
    base_a_ = full_run(session_, *make_candidate_(base_, opt_.seed_a), ctx_);
    const FullRun base_b = full_run(session_, *make_candidate_(base_, opt_.seed_b), ctx_);
    base_r2r_ = run_to_run(base_a_, base_b, session_.stages);
  }

  // The touched stages under `p`, each in isolation. The good side usually equals the base
  // policy at every stage and is computed once.
  LocalError local(const Policy& p, const std::vector<OpKind>& kinds) {
    const std::unique_ptr<Backend> cand = make_candidate_(p, opt_.seed_a);
    std::vector<TensorDiff> rows;
    for (const Stage& s : session_.stages) {
      if (!touches(kinds, s.kind)) continue;
      const Numerics n = p.resolve(s.name);
      auto& entries = cache_[s.name];
      auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == n; });
      if (it == entries.end()) {
        entries.emplace_back(n, isolated_diffs(session_, s, *cand, ctx_, {}));
        it = entries.end() - 1;
      }
      rows.insert(rows.end(), it->second.begin(), it->second.end());
    }
    return pool(std::move(rows));
  }

  void full(const Policy& p, AuditSide& side) {
    if (!opt_.full_runs) return;
    side.ran_full = true;
    if (same_as_base(p)) {
      side.full = base_a_;
      side.r2r = base_r2r_;
      return;
    }
    side.full = full_run(session_, *make_candidate_(p, opt_.seed_a), ctx_);
    const FullRun b = full_run(session_, *make_candidate_(p, opt_.seed_b), ctx_);
    side.r2r = run_to_run(side.full, b, session_.stages);
  }

  // Both settings of one knob, isolated and (with full runs) end to end; `count` is "[i/n] ".
  AuditRow row(const KnobInfo& k, const std::string& count, const std::vector<OpKind>& missing, const std::string& backend) {
    AuditRow row;
    row.knob = k;
    row.selection = std::all_of(k.kinds.begin(), k.kinds.end(), is_selection);
    for (const auto& s : session_.stages) row.touched += touches(k.kinds, s.kind) ? 1 : 0;
    Policy bad = base_, good = base_;
    bad.add_set(k.name + "=" + k.bad);
    good.add_set(k.name + "=" + k.good);
    row.bad.setting = k.bad;
    row.good.setting = k.good;
    if (const auto lacking = knob_kinds_missing(k, missing); !lacking.empty()) {
      row.skipped = fmt::format("{} has no kernel for {}", backend, kind_list(lacking));
      row.factor = NAN;
      say(fmt::format("{}{}: skipped ({})", count, k.name, row.skipped));
      return row;
    }
    say(fmt::format("{}{}: {} stages in isolation", count, k.name, row.touched));
    row.bad.local = local(bad, k.kinds);
    row.good.local = local(good, k.kinds);
    if (opt_.full_runs) say(fmt::format("{}{}: full runs at {} and at {}", count, k.name, k.bad, k.good));
    full(bad, row.bad);
    full(good, row.good);
    // Full runs keep only what the report shows.
    row.bad.full.fingerprint.clear();
    row.good.full.fingerprint.clear();
    row.factor = audit_factor(row.bad, row.good, row.selection);
    return row;
  }

 private:
  bool same_as_base(const Policy& p) const {
    for (const auto& s : session_.stages)
      if (!(p.resolve(s.name) == base_.resolve(s.name))) return false;
    return true;
  }

  CaseSession& session_;
  const Policy& base_;
  const CandidateFactory& make_candidate_;
  const AuditOptions& opt_;
  RunContext ctx_;
  std::map<std::string, std::vector<std::pair<Numerics, std::vector<TensorDiff>>>> cache_;
  FullRun base_a_;
  RunToRun base_r2r_;
};

}  // namespace

AuditResult run_audit(CaseSession& session, const Policy& base, const CandidateFactory& make_candidate,
                      const AuditOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  AuditResult result;
  result.policy = base.describe();
  std::vector<KnobInfo> knobs;
  if (opt.knobs.empty()) knobs = knob_catalog();
  for (const auto& name : opt.knobs) knobs.push_back(knob_info(name));  // InputError when unknown
  std::vector<OpKind> missing;
  {
    const std::unique_ptr<Backend> probe = make_candidate(base, opt.seed_a);
    result.backend = probe->name();
    missing = missing_kinds(session, *probe);
  }
  if (opt.full_runs && !missing.empty())
    input_error("audit: {} has no kernel for {}, so it cannot run the model end to end (audit with --no-full-runs)",
                result.backend, kind_list(missing));
  Auditor auditor(session, base, make_candidate, opt);
  auditor.run_base();
  for (std::size_t ki = 0; ki < knobs.size(); ++ki)
    result.rows.push_back(auditor.row(knobs[ki], fmt::format("[{}/{}] ", ki + 1, knobs.size()), missing, result.backend));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tdiff
