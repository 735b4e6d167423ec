#include "checks/determinism.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checks/finding_table.h"
#include "base/error.h"
#include "backend/executor.h"
#include "backend/timed_backend.h"
#include "model/pattern.h"

namespace tdiff {

BitDiff bit_diff(const Tensor& a, const Tensor& b) {
  BitDiff d;
  d.numel = std::max(a.numel(), b.numel());
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    d.differing = d.numel;
    d.max_abs = std::numeric_limits<double>::infinity();
    return d;
  }
  const std::size_t size = dtype_size(a.dtype());
  const std::byte *pa = a.raw(), *pb = b.raw();
  for (std::int64_t i = 0; i < d.numel; ++i) {
    if (std::memcmp(pa + static_cast<std::size_t>(i) * size, pb + static_cast<std::size_t>(i) * size, size) == 0) continue;
    ++d.differing;
    const double x = a.value(i), y = b.value(i);
    const double diff = std::isfinite(x) && std::isfinite(y) ? std::fabs(x - y) : std::numeric_limits<double>::infinity();
    if (!(diff <= d.max_abs)) d.max_abs = diff;  // NaN-safe: a NaN difference counts as the largest
  }
  return d;
}

std::string bit_diff_text(const BitDiff& d) {
  if (d.identical()) return "identical";
  const std::string size = d.differing == d.numel ? fmt::format("all {} elements", d.numel)
                                                  : fmt::format("{} of {} elements", d.differing, d.numel);
  return fmt::format("max |diff| {:.3g} in {}", d.max_abs, size);
}

std::string RunSpec::label() const {
  return fmt::format("run {} (seed {}, {} thread{})", number, seed, threads, threads == 1 ? "" : "s");
}

std::string SweepBatch::label() const {
  return fmt::format("batch of {} [{}], {} padding to {}", size, fmt::join(prompts, ","), pad_left ? "left" : "right",
                     seq);
}

// ---- FindingTable ------------------------------------------------------------------------

FindingTable::FindingTable(const std::vector<Stage>& stages, std::string report) : report_(std::move(report)) {
  for (const auto& s : stages) {
    stage_order_.emplace(s.name, stage_order_.size());
    copt_.stage_order.push_back(s.name);
  }
}

BitDiff FindingTable::record(const Stage& s, const std::string& tensor, const Tensor& base, const Tensor& other,
                             int where, const std::string& label, bool inputs_identical) {
  const BitDiff d = bit_diff(base, other);
  if (!pattern_matches(report_, s.name)) return d;
  const std::string key = s.name + "/" + tensor;
  Entry& e = entry(s, tensor);
  Finding& f = e.finding;
  const bool worse = !d.identical() && (f.where.empty() || d.max_abs > f.max_abs ||
                                        (d.max_abs == f.max_abs && d.differing > f.differing));
  if (!d.identical()) {
    if (f.where.empty() || f.where.back() != where) f.where.push_back(where);
    f.origin = f.origin || inputs_identical;
  }
  if (worse) {
    f.max_abs = d.max_abs;
    f.differing = d.differing;
    f.numel = d.numel;
    f.worst = label;
  }
  if (worse || !e.have_row) {
    if (base.shape() == other.shape()) {
      e.worst = diff_tensor(key, base, other, copt_);
    } else {
      e.worst = TensorDiff{};
      e.worst.stage = s.name, e.worst.tensor = tensor, e.worst.shape = base.shape();
      e.worst.metrics.count = base.numel();
    }
    e.have_row = true;
  }
  return d;
}

FindingTable::Entry& FindingTable::entry(const Stage& s, const std::string& tensor) {
  auto [it, fresh] = entries_.try_emplace(s.name + "/" + tensor);
  Entry& e = it->second;
  if (fresh) {
    e.order = stage_order_.at(s.name) * 64 + static_cast<std::size_t>(
                  std::find(s.outputs.begin(), s.outputs.end(), tensor) - s.outputs.begin());
    e.finding.stage = s.name;
    e.finding.tensor = tensor;
  }
  return e;
}

void FindingTable::record_identical(const Stage& s, const std::string& tensor, std::int64_t numel) {
  if (!pattern_matches(report_, s.name)) return;
  Entry& e = entry(s, tensor);
  if (e.have_row) return;
  e.worst = TensorDiff{};
  e.worst.stage = s.name, e.worst.tensor = tensor;
  e.worst.metrics.count = e.worst.metrics.compared = numel;  // identical: cosine 1, every difference 0
  e.have_row = true;
}

std::vector<Finding> FindingTable::findings() const {
  std::vector<const Entry*> sorted;
  for (const auto& [k, e] : entries_)
    if (!e.finding.where.empty()) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) { return a->order < b->order; });
  std::vector<Finding> out;
  for (const Entry* e : sorted) out.push_back(e->finding);
  return out;
}

CompareResult FindingTable::table(const std::string& label_ref, const std::string& label_cand,
                                  const std::string& where_word) const {
  std::vector<const Entry*> sorted;
  for (const auto& [k, e] : entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) { return a->order < b->order; });
  CompareResult r;
  r.label_ref = label_ref;
  r.label_cand = label_cand;
  for (const Entry* e : sorted) {
    TensorDiff row = e->worst;
    const Finding& f = e->finding;
    if (f.where.empty()) {
      row.verdict = Verdict::pass;
      row.reason = "bit-identical";
    } else {
      row.verdict = Verdict::fail;
      row.reason = fmt::format("not bit-identical in {} {} ({}); worst: {}, {}{}", f.where.size(), where_word,
                               fmt::join(f.where, ","), f.worst,
                               bit_diff_text(BitDiff{f.numel, f.differing, f.max_abs}),
                               f.origin ? "; origin: its inputs were identical" : "");
      if (r.first_fail < 0) r.first_fail = static_cast<int>(r.rows.size());
      r.verdict = Verdict::fail;
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

// ---- Run to run -------------------------------------------------------------------------

namespace {
// Restores the OpenMP thread count on scope exit.
struct ThreadCountGuard {
  int saved = omp_get_max_threads();
  ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

// A run compared on the device: each output's comparison in model order, origins found as the
// host comparison finds them (differing while every input of its stage was identical).
void judge_on_device(const std::vector<Stage>& stages, std::vector<DeviceComparison::Diff> diffs, FindingTable& table,
                     int k, const std::string& label) {
  std::map<std::string, DeviceComparison::Diff> by_key;
  for (auto& d : diffs) by_key[d.key] = std::move(d);
  std::set<std::string> differing;
  for (const auto& s : stages) {
    bool inputs_identical = true;
    for (const auto& in : s.inputs) inputs_identical = inputs_identical && !differing.count(in.key());
    for (const auto& t : s.outputs) {
      const auto it = by_key.find(s.name + "/" + t);
      if (it == by_key.end()) throw std::logic_error("determinism --on-device: no comparison of " + s.name + "/" + t);
      const DeviceComparison::Diff& d = it->second;
      if (d.differing == 0) {
        table.record_identical(s, t, d.numel);
        continue;
      }
      differing.insert(d.key);
      table.record(s, t, d.base, d.other, k, label, inputs_identical);
    }
  }
}
}  // namespace

DeterminismResult check_determinism(CaseSession& session, const BackendFactory& make, const DeterminismOptions& opt) {
  if (opt.runs < 2) input_error("determinism: --runs must be at least 2 (got {})", opt.runs);
  if (opt.on_device && opt.run1) throw std::logic_error("determinism: a given run 1 cannot be compared on the device");
  for (int t : opt.threads)
    if (t < 1) input_error("determinism: thread counts must be positive (got {})", t);
  if (!opt.stages.empty()) select_stages(opt.stages, session.stages);
  ThreadCountGuard guard;
  const int n = std::max(opt.runs, static_cast<int>(opt.threads.size()));
  const auto t0 = std::chrono::steady_clock::now();

  DeterminismResult res;
  FindingTable table(session.stages, opt.stages);
  TensorMap base;  // run 1's outputs by key
  if (opt.run1) base = *opt.run1;
  for (int k = 1; k <= n; ++k) {
    RunSpec spec{k, opt.seed + static_cast<std::uint64_t>(k - 1),
                 opt.threads.empty() ? guard.saved : opt.threads[static_cast<std::size_t>(k - 1) % opt.threads.size()]};
    res.runs.push_back(spec);
    PhaseTimes& times = res.run_times.emplace_back();
    if (k == 1 && opt.run1) continue;
    omp_set_num_threads(spec.threads);
    auto setup = times.measure("backend setup");
    auto made = make(spec.seed);
    setup.stop();
    TimedBackend timed(*made, times, "candidate", "finish");
    Backend* backend = &timed;
    if (opt.on_device) opt.on_device->attach(*made, k == 1);
    std::set<std::string> differing;  // keys of this run that differ from run 1
    ExecutorHooks hooks;
    hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
      if (opt.progress) opt.progress(spec, s, i);
      if (opt.on_device) return;  // compared on the device: judged after the run
      bool inputs_identical = true;
      for (const auto& in : s.inputs) inputs_identical = inputs_identical && !differing.count(in.key());
      auto t = times.measure("compare");
      for (std::size_t j = 0; j < out.size(); ++j) {
        const std::string key = s.name + "/" + s.outputs[j];
        if (k == 1) {
          base[key] = out[j];
        } else if (!table.record(s, s.outputs[j], base.at(key), out[j], k, spec.label(), inputs_identical).identical()) {
          differing.insert(key);
        }
      }
    };
    RunContext ctx = session.context();
    TensorMap env;
    put_inputs(session.info.batch, env);
    execute(session.stages, [&](const Stage&) -> Backend& { return *backend; }, ctx, env, hooks);
    if (opt.on_device && k > 1) {
      auto t = times.measure("compare");
      judge_on_device(session.stages, opt.on_device->collect(*made), table, k, spec.label());
    }
    times.stop_clock();
  }
  res.findings = table.findings();
  res.table = table.table(res.runs.front().label(), "the run that differs most (per tensor)", "runs");
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tdiff
