#pragma once
// The statistics of diff/model_stats.h for a case's stored reference. Attention logits are not
// stored (only stage outputs are), so they are recomputed from the reference's stored inputs of
// every Lxx.attn.core (q, kv, masks, compressed entries) and the model's sinks with refcpu's own
// attention code (refcpu/attention.h), bit for bit the numbers the reference summed.
#include <string>

#include "core/session.h"
#include "diff/model_stats.h"

namespace tdiff {

// InputError naming the case and the stage/tensor when the reference lacks a tensor it needs
// (every layer's attn.core inputs, hc_ffn.post/X, moe.router/score).
ModelStats compute_model_stats(CaseSession& session);

}  // namespace tdiff
