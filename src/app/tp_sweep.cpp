#include "app/tp_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "emu/emu_backend.h"
#include "exec/mixed_run.h"
#include "model/pattern.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::app {

namespace {

struct Config {
  int tp = 1;
  AllReduce order = AllReduce::ring;
  std::string label;  // "tp=4 ring"
};

// One configuration's run: every output against the reference and against the unsplit run.
struct ConfigRun {
  Config config;
  std::map<std::string, double> rel_ref, rel_unsplit;  // rel_l2 by "stage/tensor"
  std::map<std::string, std::uint64_t> hashes;
  std::int64_t moved = 0;    // outputs whose bits differ from the unsplit run
  std::string first_moved;
  std::map<std::string, emu::EmuBackend::OrderProbe> probes;
  std::vector<TensorDiff> rows;  // against the reference
};

std::uint64_t hash_bytes(const Tensor& t) {  // FNV-1a: enough to tell two runs' bits apart
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ t.nbytes();
}

// ||a - b|| / ||b|| of two float64 outputs (integer outputs: 0 when equal, else 1).
double rel_diff(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::f64 || b.dtype() != DType::f64 || a.numel() != b.numel())
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0 ? 0.0 : 1.0;
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

ConfigRun run_config(CaseSession& session, const Policy& p, const Config& cfg, std::uint64_t seed,
                     std::map<std::string, Tensor>* keep, const std::map<std::string, Tensor>* unsplit) {
  emu::EmuBackend be(p, seed);
  be.probe_orders(cfg.tp > 1);
  refcpu::RefCpuBackend reference;
  RunContext ctx = session.context();
  ConfigRun r;
  r.config = cfg;
  MixedRunOptions mo;
  mo.on_outputs = [&](const Stage& s, const std::vector<Tensor>& out) {
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::string key = s.name + "/" + s.outputs[k];
      r.hashes[key] = hash_bytes(out[k]);
      if (keep) keep->emplace(key, out[k]);
      if (!unsplit) continue;
      const auto it = unsplit->find(key);
      if (it == unsplit->end()) continue;
      r.rel_unsplit[key] = rel_diff(out[k], it->second);
      if (hash_bytes(it->second) != r.hashes[key] && r.moved++ == 0) r.first_moved = key;
    }
  };
  const std::vector<bool> all(session.stages.size(), true);
  MixedRunResult m = run_mixed(session, be, reference, all, ctx, mo);
  for (auto& d : m.diff.rows) {
    r.rel_ref[d.key()] = d.metrics.rel_l2;
    r.rows.push_back(std::move(d));
  }
  r.probes = be.order_probes();
  return r;
}

// The outputs the table prints: every one (--all), those matching --stages, or the reduced
// stages of a split and the logits.
std::vector<std::string> shown_keys(const std::vector<Stage>& stages, const TpSweepOptions& opt) {
  std::vector<std::string> keys;
  for (const Stage& s : stages) {
    const bool reduced = s.op_class == "attn.o_b" || s.op_class.starts_with("moe.experts") ||
                         s.op_class.starts_with("moe.shared") || s.op_class == "moe.out" || s.kind == OpKind::lm_head;
    const bool shown = opt.all_rows || (opt.stages.empty() ? reduced : pattern_matches(opt.stages, s.name));
    if (shown)
      for (const auto& t : s.outputs) keys.push_back(s.name + "/" + t);
  }
  return keys;
}

void print_summary(const std::vector<ConfigRun>& runs) {
  fmt::print("  {:<16} {:>14}  {:<28} {:>13}  {}\n", "split", "moved vs tp=1", "first moved", "logits rel_l2",
             "order probe (ring vs tree on the run's partials)");
  for (const auto& r : runs) {
    double logits = 0;
    for (const auto& [k, v] : r.rel_ref)
      if (k.ends_with("/logits")) logits = v;
    std::int64_t elements = 0, differing = 0;
    for (const auto& [stage, p] : r.probes) elements += p.elements, differing += p.differing;
    const std::string probe = r.config.tp == 1 ? "-"
                              : r.config.tp < 4 ? fmt::format("{} of {} elements ({} ranks: order-independent)", differing, elements, r.config.tp)
                                                : fmt::format("{} of {} elements move with the order", differing, elements);
    fmt::print("  {:<16} {:>14}  {:<28} {:>13.3g}  {}\n", r.config.label,
               r.config.tp == 1 ? std::string("-") : fmt::format("{}/{}", r.moved, r.hashes.size()),
               r.first_moved.empty() ? "-" : r.first_moved, logits, probe);
  }
}

// Per output: rel_l2 against the reference, and (after '/') against the unsplit run.
void print_matrix(const std::vector<ConfigRun>& runs, const std::vector<std::string>& keys) {
  fmt::print("\n  rel_l2 against the float64 reference / against tp=1\n  {:<28}", "stage/tensor");
  for (const auto& r : runs) fmt::print(" {:>19}", r.config.label);
  fmt::print("\n");
  for (const auto& key : keys) {
    fmt::print("  {:<28}", key);
    for (const auto& r : runs) {
      const auto ref = r.rel_ref.find(key), un = r.rel_unsplit.find(key);
      const std::string a = ref == r.rel_ref.end() ? "-" : fmt::format("{:.2e}", ref->second);
      const std::string b = r.config.tp == 1 || un == r.rel_unsplit.end() ? "" : fmt::format("/{:.1e}", un->second);
      fmt::print(" {:>19}", a + b);
    }
    fmt::print("\n");
  }
}

std::vector<Config> configs_of(const TpSweepOptions& opt) {
  std::vector<Config> configs{{1, AllReduce::ring, "tp=1"}};
  for (int tp : opt.sizes) {
    if (tp == 1) continue;
    for (const auto& o : opt.orders) {
      Split probe;
      set_split(probe, "allreduce", o);  // InputError for an unknown order
      set_split(probe, "tp", std::to_string(tp));
      configs.push_back({tp, probe.allreduce, fmt::format("tp={} {}", tp, o)});
    }
  }
  return configs;
}

}  // namespace

TpSweepOutcome run_tp_sweep(CaseSession& session, const Policy& base, const TpSweepOptions& opt) {
  if (opt.orders.empty()) input_error("--orders: at least one all-reduce order");
  const std::vector<Config> configs = configs_of(opt);
  std::vector<ConfigRun> runs;
  std::map<std::string, Tensor> unsplit;
  std::vector<std::string> unpinned, vacuous;
  bool revealing_size = false;
  for (const Config& cfg : configs) {
    Policy p = base;
    p.set_split_setting("tp", std::to_string(cfg.tp));
    p.set_split_setting("allreduce", allreduce_name(cfg.order));
    check_split(p.split(), session.info.config);
    fmt::print(stderr, "tp sweep: {}\n", cfg.label);
    runs.push_back(run_config(session, p, cfg, opt.seed, cfg.tp == 1 ? &unsplit : nullptr, cfg.tp == 1 ? nullptr : &unsplit));
    // The pinned order again, another run seed: the same bits or the mode does not deliver.
    const ConfigRun again = run_config(session, p, cfg, opt.seed + 1, nullptr, nullptr);
    if (again.hashes != runs.back().hashes) unpinned.push_back(cfg.label);
    if (cfg.tp < 4) continue;
    revealing_size = true;
    for (const auto& [stage, probe] : runs.back().probes)
      if (probe.differing == 0) vacuous.push_back(fmt::format("{} {}", cfg.label, stage));
  }
  if (!revealing_size) vacuous.push_back("no split of 4 or more ranks (a 2-rank sum is order-independent)");
  fmt::print("tp sweep: emu under {}, sizes {}, orders {}\n", base.describe(), fmt::join(opt.sizes, ","),
             fmt::join(opt.orders, ","));
  print_summary(runs);
  print_matrix(runs, shown_keys(session.stages, opt));

  TpSweepOutcome out;
  const std::vector<std::string> keys = shown_keys(session.stages, opt);
  for (std::size_t i = 1; i < runs.size(); ++i) {
    out.configs += (out.configs.empty() ? "" : ", ") + runs[i].config.label;
    for (auto& row : runs[i].rows) {
      if (std::find(keys.begin(), keys.end(), row.key()) == keys.end()) continue;
      const auto un = runs[i].rel_unsplit.find(row.key());
      row.reason = fmt::format("{}: rel_l2 against tp=1 {:.3g}", runs[i].config.label,
                               un == runs[i].rel_unsplit.end() ? 0.0 : un->second);
      row.stage = fmt::format("[{}] {}", runs[i].config.label, row.stage);
      out.table.rows.push_back(std::move(row));
    }
  }
  out.ok = vacuous.empty() && unpinned.empty();
  out.verdict = !vacuous.empty() ? "VACUOUS" : !unpinned.empty() ? "NONDETERMINISTIC" : "PASS";
  out.summary = !vacuous.empty()
                    ? fmt::format("these inputs cannot reveal a reordering of the ranks' sum: {}", fmt::join(vacuous, "; "))
                : !unpinned.empty() ? fmt::format("a pinned order gave other bits run to run: {}", fmt::join(unpinned, ", "))
                                    : fmt::format("{} splits: every reduction moves with the order at 4+ ranks, every "
                                                  "pinned order repeats its bits",
                                                  runs.size() - 1);
  return out;
}

}  // namespace tdiff::app
