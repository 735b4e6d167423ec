#pragma once
// The operator table: one row per operator kind, the one place that says what an operator
// is apart from its arithmetic. Stage classes, report grouping, compare's tensor kinds,
// row slicing, selection replay and the knob catalogue's operator lists are read from it;
// adding a kind means adding its row (a static_assert in op_table.cpp checks that every
// kind has one, in order).
//
//   family     the backends' handler file for the kind ("moe" -> moe.cpp in each backend)
//   output     how its output tensors are compared: values, logits, routing ids, exact masks
//   selection  chooses discrete ids (moe_select, idx_topk): replayed, tie-checked, topk_* knobs
//   layout     where a batch row's data sits in its outputs (B rows, S tokens a row), as
//              row_slice cuts one row out:
//     tokens        [B,S,...]  per token; on a compressed stage of this layout (the
//                              compressor's norm) the outputs are [B,n,...] entries, by shape
//     flat_tokens   [B*S,...]  per token, rows flattened (router and MoE)
//     entries       [B,n,...]  compressed entries, n = S/m for the layer's rate m
//     query_key     [B,S,S]    query x key visibility
//     query_entry   [B,S,n]    query x compressed entry (scores, visibility)
//     selected_ids  [B,S,k]    the entry ids a query selected, -1 padded
//   gemm       a GEMM whose operands and sums follow matmul_input / matmul_accum
//   split_k    sums split-K or expert partials, in an order the reduction knob picks
//   store      where a correct kernel rounds its outputs (the tolerance model, diff/expected.h):
//              in the policy's storage format, in its stream format, kept in float32 (the
//              router, softmax-like maps, scores and logits, when their knobs are right), or
//              not at all (integer outputs)
//   gpu_test   the file of tests/gpu that checks its kernels ("" none yet); that file names
//              the kind in its "// covers:" line
// Compute kinds (the `storage` knob's) are those whose outputs are floating point: every
// kind but the masks and the selections.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tdiff {

// One operator kind per distinct computation; a backend implements each kind once.
enum class OpKind {
  embed,           // ids -> e
  hc_expand,       // e -> X (n_hc copies)
  rope_table,      // positions -> cos, sin
  window_mask,     // mask -> sliding-window visibility
  hc_mix,          // X -> mix (RMS-normalised flat streams times fn)
  hc_sinkhorn,     // mix -> pre, post, comb
  hc_pre,          // X, pre -> x
  rms_norm,        // x -> weighted RMSNorm
  linear,          // x -> x W^T
  head_rms_norm,   // per-head unweighted RMSNorm
  rope,            // rotate trailing r channels at token positions
  cmp_proj,        // h -> P, Z
  pool,            // P, Z -> gated pooling over windows
  entry_rope,      // rotate compressed entries at w * rate
  idx_weights,     // h -> indexer head weights
  idx_score,       // QI, KI, weights -> scores
  idx_topk,        // scores -> selected entries
  cmp_mask,        // compressed-entry visibility
  attention,       // q, kv, C, masks, sinks -> o
  rope_inverse,    // de-rotate the attention output
  grouped_linear,  // grouped output projection o_a
  hc_post,         // X, y, post, comb -> X'
  router,          // z -> logit, score
  moe_select,      // hash or top-k expert choice
  moe_weights,     // routing weights
  moe_experts,     // routed SwiGLU experts
  moe_shared,      // shared SwiGLU expert
  add,             // routed + shared
  hc_head,         // X -> y (final stream collapse)
  lm_head,         // logits
};

// Kinds are numbered 0..lm_head; tables indexed by kind have this many rows.
inline constexpr std::size_t kOpKindCount = static_cast<std::size_t>(OpKind::lm_head) + 1;

enum class OpFamily { embedding, hyper_connection, rope, mask, norm, linear, compressor, indexer, attention, moe };
inline constexpr std::size_t kOpFamilyCount = static_cast<std::size_t>(OpFamily::moe) + 1;

enum class TensorKind : std::uint8_t {
  values,   // floating-point activations
  logits,   // floating-point logits: also per-token top-1, top-k, KL
  routing,  // integer selections [..., K]: expert-set agreement
  exact,    // other integer/boolean tensors (masks): exact comparison
};

enum class OutStore { storage, stream, f32, exact };

enum class RowLayout { tokens, flat_tokens, entries, query_key, query_entry, selected_ids };

struct OpInfo {
  OpKind kind;
  const char* name;
  OpFamily family;
  TensorKind output;
  bool selection;
  RowLayout layout;
  bool gemm;
  bool split_k;
  OutStore store;
  const char* gpu_test;

  bool compute() const { return output == TensorKind::values || output == TensorKind::logits; }
};

const std::array<OpInfo, kOpKindCount>& op_table();
const OpInfo& op_info(OpKind k);
// The kinds whose row passes `pred`, in kind order.
std::vector<OpKind> op_kinds_where(bool (*pred)(const OpInfo&));

const char* op_kind_name(OpKind k);
const char* op_family_name(OpFamily f);
const char* tensor_kind_name(TensorKind k);

}  // namespace tdiff
