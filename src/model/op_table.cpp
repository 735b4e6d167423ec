#include "model/op_table.h"

namespace tdiff {

namespace {

using K = OpKind;
using F = OpFamily;
using T = TensorKind;
using L = RowLayout;
using S = OutStore;
constexpr bool sel = true, gemm = true, split_k = true, no = false;

constexpr std::array<OpInfo, kOpKindCount> kOps = {{
    // kind            name              family               output      selection layout        gemm  split_k store       gpu test
    {K::embed,          "embed",          F::embedding,        T::values,  no,  L::tokens,       no,   no,     S::storage, "test_elementwise.cpp"},
    {K::hc_expand,      "hc_expand",      F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::stream,  "test_elementwise.cpp"},
    {K::rope_table,     "rope_table",     F::rope,             T::values,  no,  L::tokens,       no,   no,     S::f32,     "test_rope.cpp"},
    {K::window_mask,    "window_mask",    F::mask,             T::exact,   no,  L::query_key,    no,   no,     S::exact,   "test_mask.cpp"},
    {K::hc_mix,         "hc_mix",         F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::f32,     "test_hyper_connection.cpp"},
    {K::hc_sinkhorn,    "hc_sinkhorn",    F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::f32,     "test_hyper_connection.cpp"},
    {K::hc_pre,         "hc_pre",         F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::stream,  "test_hyper_connection.cpp"},
    {K::rms_norm,       "rms_norm",       F::norm,             T::values,  no,  L::tokens,       no,   no,     S::storage, "test_norm.cpp"},
    {K::linear,         "linear",         F::linear,           T::values,  no,  L::tokens,       gemm, split_k,S::storage, "test_gemm.cpp"},
    {K::head_rms_norm,  "head_rms_norm",  F::norm,             T::values,  no,  L::tokens,       no,   no,     S::storage, "test_norm.cpp"},
    {K::rope,           "rope",           F::rope,             T::values,  no,  L::tokens,       no,   no,     S::storage, "test_rope.cpp"},
    {K::cmp_proj,       "cmp_proj",       F::compressor,       T::values,  no,  L::tokens,       gemm, split_k,S::storage, "test_gemm.cpp"},
    {K::pool,           "pool",           F::compressor,       T::values,  no,  L::entries,      no,   no,     S::storage, "test_compressor.cpp"},
    {K::entry_rope,     "entry_rope",     F::rope,             T::values,  no,  L::entries,      no,   no,     S::storage, "test_rope.cpp"},
    // A GEMM then a scale and rounding whose kernel no GPU test checks.
    {K::idx_weights,    "idx_weights",    F::indexer,          T::values,  no,  L::tokens,       gemm, split_k,S::f32,     ""},
    {K::idx_score,      "idx_score",      F::indexer,          T::values,  no,  L::query_entry,  no,   no,     S::f32,     "test_indexer.cpp"},
    {K::idx_topk,       "idx_topk",       F::indexer,          T::routing, sel, L::selected_ids, no,   no,     S::exact,   "test_indexer.cpp"},
    {K::cmp_mask,       "cmp_mask",       F::mask,             T::exact,   no,  L::query_entry,  no,   no,     S::exact,   "test_mask.cpp"},
    {K::attention,      "attention",      F::attention,        T::values,  no,  L::tokens,       no,   no,     S::storage, "test_attention.cpp"},
    {K::rope_inverse,   "rope_inverse",   F::rope,             T::values,  no,  L::tokens,       no,   no,     S::storage, "test_rope.cpp"},
    {K::grouped_linear, "grouped_linear", F::linear,           T::values,  no,  L::tokens,       gemm, split_k,S::storage, "test_gemm.cpp"},
    {K::hc_post,        "hc_post",        F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::stream,  "test_hyper_connection.cpp"},
    // The router has its own knob for its GEMM (router), as lm_head has (logits).
    {K::router,         "router",         F::moe,              T::values,  no,  L::flat_tokens,  no,   split_k,S::f32,     "test_moe.cpp"},
    {K::moe_select,     "moe_select",     F::moe,              T::routing, sel, L::flat_tokens,  no,   no,     S::exact,   "test_topk.cpp"},
    {K::moe_weights,    "moe_weights",    F::moe,              T::values,  no,  L::flat_tokens,  no,   no,     S::f32,     "test_moe.cpp"},
    {K::moe_experts,    "moe_experts",    F::moe,              T::values,  no,  L::flat_tokens,  gemm, split_k,S::storage, "test_moe.cpp"},
    {K::moe_shared,     "moe_shared",     F::moe,              T::values,  no,  L::flat_tokens,  gemm, split_k,S::storage, "test_moe.cpp"},
    {K::add,            "add",            F::moe,              T::values,  no,  L::tokens,       no,   no,     S::storage, "test_elementwise.cpp"},
    {K::hc_head,        "hc_head",        F::hyper_connection, T::values,  no,  L::tokens,       no,   no,     S::stream,  "test_hyper_connection.cpp"},
    {K::lm_head,        "lm_head",        F::linear,           T::logits,  no,  L::tokens,       no,   split_k,S::f32,     "test_gemm.cpp"},
}};

// A missing row leaves a zeroed one (kind embed) out of place; a new kind without a row
// does the same at the end.
constexpr bool rows_in_kind_order() {
  for (std::size_t i = 0; i < kOps.size(); ++i)
    if (static_cast<std::size_t>(kOps[i].kind) != i || kOps[i].name == nullptr) return false;
  return true;
}
static_assert(rows_in_kind_order(), "op_table: every OpKind needs its row, in enum order");

}  // namespace

const std::array<OpInfo, kOpKindCount>& op_table() { return kOps; }

const OpInfo& op_info(OpKind k) { return kOps.at(static_cast<std::size_t>(k)); }

std::vector<OpKind> op_kinds_where(bool (*pred)(const OpInfo&)) {
  std::vector<OpKind> v;
  for (const OpInfo& op : kOps)
    if (pred(op)) v.push_back(op.kind);
  return v;
}

const char* op_kind_name(OpKind k) { return op_info(k).name; }

const char* op_family_name(OpFamily f) {
  switch (f) {
    case F::embedding: return "embedding";
    case F::hyper_connection: return "hyper_connection";
    case F::rope: return "rope";
    case F::mask: return "mask";
    case F::norm: return "norm";
    case F::linear: return "linear";
    case F::compressor: return "compressor";
    case F::indexer: return "indexer";
    case F::attention: return "attention";
    case F::moe: return "moe";
  }
  return "?";
}

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case T::values: return "values";
    case T::logits: return "logits";
    case T::routing: return "routing";
    case T::exact: return "exact";
  }
  return "?";
}

}  // namespace tdiff
