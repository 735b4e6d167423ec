#pragma once
// The forward pass as a flat, ordered list of stages (shared spec section 4). Every other
// part of tdiff (backends, executor, taps, diff, bisector, reports) works on this list.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

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

const char* op_kind_name(OpKind k);

// A stage output consumed by a later stage: "<stage>/<tensor>", or "inputs/<name>" for the
// case inputs (ids, mask, pos).
struct TensorRef {
  std::string stage;
  std::string tensor;
  std::string key() const { return stage + "/" + tensor; }
};

struct Stage {
  std::string name;        // stable public name, e.g. "L03.attn.core"
  OpKind kind;
  int layer = -1;          // -1 for prologue/epilogue
  LayerType layer_type = LayerType::sliding;
  std::vector<TensorRef> inputs;
  std::vector<std::string> outputs;  // tensor names, stored as "<stage>/<name>"
  std::vector<std::string> weights;  // HF parameter names
  // Operator parameters that the kind alone does not fix.
  bool compress_rope = false;  // RoPE table: compress (CSA/HCA layers) instead of main
  std::int64_t rate = 0;       // compression rate for pool/entry_rope/idx/cmp_mask stages
  bool overlap = false;        // overlapping (CSA) pooling
  std::int64_t width = 0;      // head width for head_rms_norm/rope/pool (d, d_I)
  // rms_norm of a hyper-connection collapse (attn_norm, ffn_norm, final.norm): its input is
  // in the stream dtype (spec §3.7), so candidates read it in the policy's stream format.
  bool stream_input = false;
};

std::vector<Stage> build_stages(const ModelConfig& c);

// Operator class of a stage for attribution and reports ("attention", "moe.experts", ...).
std::string stage_class(const Stage& s);

}  // namespace tdiff
