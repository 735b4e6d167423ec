#include "model/tensor_contract.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace tdiff {

namespace {

using Axes = std::vector<Axis>;

// What the specs of one stage are made from: the model, the batch, and the specs made so far
// (elementwise kinds take the shape of their input).
struct Builder {
  const ModelConfig& c;
  std::int64_t B, S;
  std::map<std::string, const Stage*> pool_of;  // cmp_proj stage -> the pool that reads its P, Z
  std::map<std::string, Axes> made;             // "<stage>/<tensor>" -> axes

  // Entries of a compressed layer: n = ⌊S/m⌋, possibly 0 (model-spec §4.3); the stage's own
  // rate where the graph sets one, else its layer's.
  std::int64_t entries(const Stage& s) const {
    const std::int64_t rate = s.rate > 0 ? s.rate : c.rate(s.layer_type);
    return rate > 0 ? S / rate : 0;
  }

  // The axes the operator table's layout column puts first.
  Axes leading(const Stage& s) const {
    const std::int64_t n = entries(s);
    switch (op_info(s.kind).layout) {
      case RowLayout::tokens: return {{"B", B}, {"S", S}};
      case RowLayout::flat_tokens: return {{"N", B * S}};
      case RowLayout::entries: return {{"B", B}, {"n", n}};
      case RowLayout::query_key: return {{"B", B}, {"S", S}, {"S", S}};
      case RowLayout::query_entry: return {{"B", B}, {"S", S}, {"n", n}};
      // k = min(k_I, n), n of the whole sequence (model-spec §4.4 step 29).
      case RowLayout::selected_ids: return {{"B", B}, {"S", S}, {"k", std::min(c.index_topk, n)}};
    }
    throw std::logic_error("tensor contract: unknown row layout");
  }

  // A linear stage's output features (model-spec §4.2, §4.4): head-major ones split per head.
  Axes linear_features(const Stage& s) const {
    if (s.op_class == "attn.q_a") return {{"R_q", c.q_lora_rank}};
    if (s.op_class == "attn.q_b") return {{"H", c.num_attention_heads}, {"d", c.head_dim}};
    if (s.op_class == "attn.kv") return {{"d", c.head_dim}};
    if (s.op_class == "attn.idx.q") return {{"H_I", c.index_n_heads}, {"d_I", c.index_head_dim}};
    if (s.op_class == "attn.o_b") return {{"D", c.hidden_size}};
    throw std::logic_error("tensor contract: no output features for the linear stage " + s.name);
  }

  // The width a pool pools (d or d_I) and its name.
  static Axis pool_width(const Stage& pool) {
    return {pool.op_class == "attn.idx.pool" ? "d_I" : "d", pool.width};
  }

  // cmp_proj's P and Z hold c·δ features: two overlapping windows (CSA) or one (HCA).
  Axes proj_features(const Stage& s) const {
    const auto it = pool_of.find(s.name);
    if (it == pool_of.end()) throw std::logic_error("tensor contract: no pool reads " + s.name);
    const Axis w = pool_width(*it->second);
    return it->second->overlap ? Axes{{"2" + w.name, 2 * w.size}} : Axes{w};
  }

  Axes like_input(const Stage& s, std::size_t i) const {
    const auto it = made.find(s.inputs.at(i).key());
    if (it == made.end()) throw std::logic_error("tensor contract: " + s.name + " reads " + s.inputs.at(i).key());
    return it->second;
  }

  // The trailing axes of output `out` of `s` (model-spec §4, §9).
  Axes trailing(const Stage& s, std::size_t out) const {
    const auto n_hc = c.hc_mult, D = c.hidden_size;
    switch (s.kind) {
      case OpKind::embed: return {{"D", D}};
      case OpKind::hc_expand: return {{"n_hc", n_hc}, {"D", D}};
      case OpKind::rope_table: return {{"r/2", c.rope_dim / 2}};
      case OpKind::hc_mix: return {{"M", c.hc_mix_width()}};
      case OpKind::hc_sinkhorn: return out == 2 ? Axes{{"n_hc", n_hc}, {"n_hc", n_hc}} : Axes{{"n_hc", n_hc}};
      case OpKind::hc_pre: return {{"D", D}};
      case OpKind::linear: return linear_features(s);
      case OpKind::cmp_proj: return proj_features(s);
      case OpKind::pool: return {pool_width(s)};
      case OpKind::idx_weights: return {{"H_I", c.index_n_heads}};
      case OpKind::attention: return {{"H", c.num_attention_heads}, {"d", c.head_dim}};
      case OpKind::grouped_linear: return {{"G*R_o", c.o_groups * c.o_lora_rank}};
      case OpKind::router: return {{"E", c.n_routed_experts}};
      case OpKind::moe_select:
      case OpKind::moe_weights: return {{"K", c.num_experts_per_tok}};
      case OpKind::moe_experts:
      case OpKind::moe_shared: return {{"D", D}};
      case OpKind::hc_head: return out == 1 ? Axes{{"n_hc", n_hc}} : Axes{{"D", D}};
      case OpKind::lm_head: return {{"V", c.vocab_size}};
      default: return {};  // masks, scores and selections: the layout gives every axis
    }
  }

  Axes axes(const Stage& s, std::size_t out) const {
    switch (s.kind) {
      case OpKind::rms_norm:  // also on compressed entries [B,n,...] (the table's "by shape")
      case OpKind::head_rms_norm:
      case OpKind::rope:
      case OpKind::rope_inverse:
      case OpKind::entry_rope:
      case OpKind::hc_post: return like_input(s, 0);
      case OpKind::add: return like_input(s, 2);  // f in the shape of z (model-spec §4.6 step 45)
      default: break;
    }
    Axes a = leading(s);
    for (auto& t : trailing(s, out)) a.push_back(std::move(t));
    return a;
  }

  TensorSpec spec(const Stage& s, std::size_t out) const {
    TensorSpec t;
    t.stage = s.name;
    t.tensor = s.outputs[out];
    t.kind = s.kind;
    const OpInfo& op = op_info(s.kind);
    t.value = op.compute() ? ValueClass::floating : op.output == TensorKind::routing ? ValueClass::index : ValueClass::boolean;
    t.axes = axes(s, out);
    if (s.kind == OpKind::moe_select) t.range = IdRange{0, c.n_routed_experts, "expert ids"};
    if (s.kind == OpKind::idx_topk) t.range = IdRange{-1, entries(s), "entry ids"};
    return t;
  }
};

bool dtype_allowed(ValueClass v, DType t, StoredBy by) {
  const bool integer = t == DType::i64 || t == DType::i32 || t == DType::u8;
  if (by == StoredBy::reference)
    return t == (v == ValueClass::floating ? DType::f64 : v == ValueClass::index ? DType::i64 : DType::boolean);
  switch (v) {
    case ValueClass::floating: return is_float(t);
    case ValueClass::index: return integer;
    case ValueClass::boolean: return t == DType::boolean || integer;
  }
  return false;
}

std::string dtype_words(ValueClass v, StoredBy by) {
  if (by == StoredBy::reference) return v == ValueClass::floating ? "f64" : v == ValueClass::index ? "i64" : "bool";
  return v == ValueClass::floating ? "floats" : v == ValueClass::index ? "integers" : "bool or integers";
}

// "[5,1]": where flat element `i` sits in `shape`.
std::string element_at(std::int64_t i, const Shape& shape) {
  std::vector<std::int64_t> at(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    at[d] = shape[d] > 0 ? i % shape[d] : 0;
    i = shape[d] > 0 ? i / shape[d] : 0;
  }
  return fmt::format("[{}]", fmt::join(at, ","));
}

}  // namespace

Shape TensorSpec::shape() const {
  Shape s;
  for (const auto& a : axes) s.push_back(a.size);
  return s;
}

std::string TensorSpec::axes_str() const {
  std::vector<std::string> names;
  for (const auto& a : axes) names.push_back(a.name);
  return fmt::format("[{}]", fmt::join(names, ","));
}

TensorContract::TensorContract(const std::vector<Stage>& stages, const ModelConfig& config, std::int64_t B,
                               std::int64_t S) {
  Builder b{config, B, S, {}, {}};
  for (const auto& s : stages)
    if (s.kind == OpKind::pool)
      for (const auto& in : s.inputs)
        if (in.tensor == "P") b.pool_of[in.stage] = &s;
  for (const auto& s : stages)
    for (std::size_t k = 0; k < s.outputs.size(); ++k) {
      TensorSpec t = b.spec(s, k);
      b.made[t.key()] = t.axes;
      index_[t.key()] = specs_.size();
      specs_.push_back(std::move(t));
    }
}

const TensorSpec* TensorContract::find(const std::string& key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

std::string TensorContract::expected(const TensorSpec& spec, StoredBy by) {
  return fmt::format("{} {} = {}{}", dtype_words(spec.value, by), spec.axes_str(), shape_str(spec.shape()),
                     by == StoredBy::dump ? " (size-1 dimensions aside)" : "");
}

void TensorContract::check_layout(const TensorSpec& spec, DType dtype, const Shape& shape, StoredBy by,
                                  const std::string& file, const std::string& dataset) {
  const bool shape_ok = by == StoredBy::dump ? squeezed(shape) == squeezed(spec.shape()) : shape == spec.shape();
  if (!shape_ok || !dtype_allowed(spec.value, dtype, by))
    input_error("{}: dataset '{}' is {} {}, expected {}", file, dataset, dtype_name(dtype), shape_str(shape),
                expected(spec, by));
}

void TensorContract::check_values(const TensorSpec& spec, const Tensor& t, const std::string& file,
                                  const std::string& dataset) {
  if (!spec.range && spec.value != ValueClass::boolean) return;
  const std::int64_t lo = spec.range ? spec.range->lo : 0, hi = spec.range ? spec.range->hi : 2;
  // In the stored type, never converted: a window mask at real widths is GBs of bytes.
  std::int64_t at = -1, value = 0;
  auto scan = [&](const auto* v) {
    for (std::int64_t i = 0; i < t.numel(); ++i)
      if (static_cast<std::int64_t>(v[i]) < lo || static_cast<std::int64_t>(v[i]) >= hi) {
        at = i, value = static_cast<std::int64_t>(v[i]);
        return;
      }
  };
  switch (t.dtype()) {
    case DType::i64: scan(t.data<std::int64_t>()); break;
    case DType::i32: scan(t.data<std::int32_t>()); break;
    case DType::u8:
    case DType::boolean: scan(t.data<std::uint8_t>()); break;
    default: return;  // check_layout admits no other type for ids and flags
  }
  if (at < 0) return;
  const std::string where = element_at(at, t.shape());
  if (!spec.range) input_error("{}: dataset '{}' holds {} at {}, expected a flag (0 or 1)", file, dataset, value, where);
  input_error("{}: dataset '{}' holds {} at {}, expected {} in [{},{}){}", file, dataset, value, where,
              spec.range->what, lo, hi, lo < 0 ? " (-1: none)" : "");
}

const char* value_class_name(ValueClass v) {
  switch (v) {
    case ValueClass::floating: return "float";
    case ValueClass::index: return "index";
    case ValueClass::boolean: return "bool";
  }
  return "?";
}

}  // namespace tdiff
