#include "diff/expected.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "base/dtype.h"
#include "diff/expected_split.h"
#include "diff/selection_scores.h"

namespace tdiff {

PortFormats port_formats(const std::vector<Stage>& stages, const Policy& policy) {
  std::map<DType, int> storage, stream;
  for (const Stage& s : stages) {
    const OutStore store = op_info(s.kind).store;
    if (store == OutStore::exact) continue;
    const Numerics n = policy.resolve(s.name);
    ++storage[n.storage];
    if (store == OutStore::stream) ++stream[n.stream];
  }
  auto most = [](const std::map<DType, int>& counts) {
    DType best = DType::f32;
    int best_n = -1;
    for (const auto& [t, k] : counts)
      if (k > best_n || (k == best_n && unit_roundoff(t) > unit_roundoff(best))) best = t, best_n = k;
    return best;
  };
  return {most(storage), most(stream)};
}

namespace {

bool reduces_over_weights(const OpInfo& op) {
  return op.gemm || op.kind == OpKind::router || op.kind == OpKind::lm_head || op.kind == OpKind::hc_mix ||
         op.kind == OpKind::rms_norm;
}

// The stage's own relative error: its outputs' rounding, its weights' (GEMMs) and a float32
// accumulation of n terms; on the float64 reference every format is float64.
// `angle`: the largest RoPE angle p w of a table (w <= 1, p below the row's length), whose
// float32 rounding moves cos and sin by up to u |p w| absolute; 0 for other kinds.
// The format the stage's outputs are rounded to.
DType output_format(const Stage& s, const PortFormats& num, bool on_candidate) {
  const OpInfo& op = op_info(s.kind);
  return !on_candidate                   ? DType::f64
         : op.store == OutStore::stream  ? num.stream
         : op.store == OutStore::storage ? num.storage
                                         : DType::f32;
}

// `split`: the roundings a split across devices adds (diff/expected_split.h); its K part is
// accumulated per rank over K/N terms, and its partials and hops rounded to the storage format.
ExpectedError local_part(const Stage& s, const PortFormats& num, std::int64_t n, double angle, bool on_candidate,
                         const SplitRounding& split = {}) {
  const OpInfo& op = op_info(s.kind);
  const bool is_split = on_candidate && split.ranks > 1;
  if (is_split) n = std::max<std::int64_t>(1, n - split.split_k + split.split_k / split.ranks);
  ExpectedError e;
  e.n_acc = n;
  const DType out = output_format(s, num, on_candidate);
  const double u_out = is_split && !split.output_rounded ? 0.0 : unit_roundoff(out);
  const double u_w = on_candidate && op.gemm ? unit_roundoff(num.storage) : 0.0;
  const double u_acc = unit_roundoff(on_candidate ? DType::f32 : DType::f64);
  const double u_p = unit_roundoff(num.storage);
  const double split2 = is_split ? u_p * u_p * (split.partials + split.hops) : 0.0;
  e.local = std::sqrt((u_out * u_out + u_w * u_w + static_cast<double>(n) * u_acc * u_acc + u_acc * angle * u_acc * angle +
                       split2) / 3.0);
  e.format = !on_candidate ? "float64 reference"
             : op.store == OutStore::stream ? fmt::format("{} stream", dtype_name(out))
                                            : std::string(dtype_name(out));
  if (is_split) e.format += ", " + split.note;
  e.source = on_candidate ? "formats" : "reference";
  return e;
}

// A tensor the candidate stores in a coarser format than the formats give its stage (an engine
// that keeps its RoPE tables in bf16 where the policy has float32 ones) carries that format's
// rounding as well: explained, whatever rounded it. The stored dtype is the dump's or backend's.
ExpectedError with_stored_rounding(ExpectedError e, DType stored, DType modelled) {
  if (!is_float(stored) || unit_roundoff(stored) <= unit_roundoff(modelled)) return e;
  const double u = unit_roundoff(stored);
  e.local = std::sqrt(e.local * e.local + u * u / 3.0);
  e.rel = std::sqrt(e.local * e.local + e.inherited * e.inherited);
  e.format = fmt::format("{} as stored", dtype_name(stored));
  return e;
}

// The relative error an input carries into the stage.
double inherited_from(const TensorRef& in, const ExpectedSetup& setup, const std::map<std::string, double>& measured,
                      const std::map<std::string, double>& modelled) {
  if (setup.inputs == StageInputs::reference || in.stage == "inputs") return 0.0;
  if (auto it = measured.find(in.key()); setup.measured_inputs && it != measured.end()) return it->second;
  if (auto it = modelled.find(in.key()); it != modelled.end()) return it->second;
  return 0.0;  // integer outputs and stages the run did not reach
}

// The candidate reads its float inputs in the format their producer stores them in (the
// port's storage or stream format, or float32): an input that comes from the float64
// reference (isolation, or a producer run on the reference in a mixed run) is rounded once
// on the way in; 0 for inputs the candidate itself stored (their rounding is in their E).
double read_rounding(const TensorRef& in, const ExpectedSetup& setup, const std::map<std::string, std::size_t>& index,
                     const PortFormats& port) {
  const auto it = index.find(in.stage);
  if (it == index.end()) return 0.0;  // the case inputs: integer ids, mask, positions
  const OutStore store = op_info(setup.session->stages[it->second].kind).store;
  if (store == OutStore::exact) return 0.0;
  const bool from_reference =
      setup.inputs == StageInputs::reference || (setup.on_candidate && !(*setup.on_candidate)[it->second]);
  if (!from_reference) return 0.0;
  return unit_roundoff(store == OutStore::stream ? port.stream : store == OutStore::storage ? port.storage : DType::f32);
}

// The row's expected error: e as the formats give it, its inherited part amplified by the
// reference's conditioning where the case stores one (diff/conditioned_error.h).
ExpectedError row_expected(ExpectedError e, const TensorDiff& row) {
  const double tail = std::sqrt(2.0 * std::log(static_cast<double>(std::max<std::int64_t>(2, row.metrics.compared))));
  if (row.conditioning) {
    const RowConditioning& c = *row.conditioning;
    e.gain_l2 = c.gain_l2;
    e.rel = std::sqrt(e.local * e.local + c.gain_l2 * c.gain_l2 * e.inherited * e.inherited);
    const ConditionedWorst w = worst_conditioned(c, e.local, e.inherited);
    e.gain_at = w.row.gain;
    e.elem_at = w.row.at;
    e.elem = std::sqrt(e.local * e.local + w.row.gain * w.row.gain * e.inherited * e.inherited) * tail;
    e.elem_ratio = w.ratio / tail;
    return e;
  }
  e.elem = e.rel * tail;
  return e;
}

}  // namespace

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f8_e4m3: return std::ldexp(1.0, -4);
    default: throw std::logic_error(fmt::format("unit_roundoff: {} is not a floating-point format", dtype_name(t)));
  }
}

std::int64_t accumulation_length(const Stage& s, const CaseSession& session) {
  const ModelConfig& c = session.info.config;
  switch (s.kind) {
    case OpKind::attention: return c.head_dim + session.info.batch.seq();
    case OpKind::idx_score: return c.index_head_dim * c.index_n_heads;
    case OpKind::head_rms_norm: return std::max<std::int64_t>(1, s.width);
    case OpKind::pool: return std::max<std::int64_t>(1, s.rate * (s.overlap ? 2 : 1));
    default: break;
  }
  if (!reduces_over_weights(op_info(s.kind))) return 1;
  std::int64_t n = 0;
  for (const auto& w : s.weights)
    if (session.weights->has(w) && !session.weights->shape(w).empty()) n += session.weights->shape(w).back();
  return std::max<std::int64_t>(1, n);
}

namespace {

// A selection's flips within the expected error of the scores it was chosen on: the margin
// the swap had to bridge is at most what two scores' errors of err_rel up to `elem` explain.
void count_flips_within_margin(CompareResult& r, const std::map<std::string, TensorDiff*>& rows) {
  for (auto& row : r.rows) {
    if (!row.routing) continue;
    const std::string sk = selection_scores_key(row.stage).key;
    const auto it = sk.empty() ? rows.end() : rows.find(sk);
    RoutingMetrics& m = *row.routing;
    m.within_margin_tokens = m.within_margin_unexplained = 0;
    if (it == rows.end() || !it->second->expected) continue;
    const double elem = it->second->expected->elem;
    for (const auto& f : m.flip_margins)
      if (f.margin <= elem) ++m.within_margin_tokens, m.within_margin_unexplained += !f.explained;
  }
}

}  // namespace

void set_expected(CompareResult& r, const ExpectedSetup& setup) {
  std::map<std::string, TensorDiff*> rows;
  std::map<std::string, double> measured, modelled;
  for (auto& row : r.rows) {
    rows[row.key()] = &row;
    // An input's error as the stage sees it: relative to the tensor (rel_l2) or, where its
    // largest elements are exact and the rest rounded, relative to each element (rel_elem).
    if (row.kind == TensorKind::values || row.kind == TensorKind::logits)
      measured[row.key()] = std::max(row.metrics.rel_l2, row.metrics.rel_elem);
  }
  const auto& stages = setup.session->stages;
  const PortFormats port = port_formats(stages, *setup.policy);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < stages.size(); ++i) index[stages[i].name] = i;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    if (!op_info(s.kind).compute()) continue;
    const bool on_candidate = !setup.on_candidate || (*setup.on_candidate)[i];
    const double angle = s.kind == OpKind::rope_table ? static_cast<double>(setup.session->info.batch.seq()) : 0.0;
    ExpectedError e = local_part(s, port, accumulation_length(s, *setup.session), angle, on_candidate,
                                 split_rounding(s, setup.policy->split(), setup.session->info.config));
    double in2 = 0;
    for (const auto& in : s.inputs) {
      const double x = inherited_from(in, setup, measured, modelled);
      const double u = on_candidate ? read_rounding(in, setup, index, port) : 0.0;
      in2 += x * x + u * u / 3.0;
    }
    e.inherited = std::sqrt(in2);
    e.rel = std::sqrt(e.local * e.local + in2);
    for (const auto& out : s.outputs) {
      const std::string key = s.name + "/" + out;
      // What later stages inherit where the run did not measure it (a bisect's end-to-end
      // chain) is the formats' error without the conditioning: each G is the amplification of
      // noise in every direction at once, and multiplied stage after stage it outgrows what a
      // port's error does (with it, an fp8 operand at L00.attn.q_a on an fp32 base no longer
      // reached the tiny model's logits limit).
      modelled[key] = e.rel;
      auto it = rows.find(key);
      if (it != rows.end() && (it->second->kind == TensorKind::values || it->second->kind == TensorKind::logits))
        it->second->expected =
            row_expected(with_stored_rounding(e, it->second->dtype_cand, output_format(s, port, on_candidate)), *it->second);
    }
  }
  count_flips_within_margin(r, rows);
}

}  // namespace tdiff
