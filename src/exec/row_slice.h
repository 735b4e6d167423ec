#pragma once
// The part of a stage output that belongs to one batch row, in a form that does not depend on
// the rest of the batch, so that a prompt's results can be compared between batches. The
// stage's operator kind gives the layout (op_table.h), the shape the rest:
//   [B,S,...] token tensors           -> [1,len,...]   the row's real tokens
//   [B*S,...] flat token tensors      -> [len,...]     (router, MoE stages)
//   [B,n,...] compressed entries      -> [1,len/m,...] the row's own entries (m = the layer's rate)
//   window mask [B,S,S]               -> [1,len,len]   real queries x real keys
//   cmp mask, indexer scores [B,S,n]  -> [1,len,len/m] real queries x the row's own entries
//   indexer selection [B,S,k]         -> [1,len,k_I]   the selected entry ids sorted, padded with
//                                                      -1 to index_topk (k = min(k_I, n) depends
//                                                      on the longest row of the batch)
// Tensors of any other shape are returned whole.
#include <cstdint>

#include "backend/backend.h"
#include "model/stage_graph.h"

namespace tdiff {

Tensor row_slice(const Stage& s, const Tensor& t, const Batch& batch, std::int64_t row, const ModelConfig& c);

// The real token ids of every row of a batch, one prompt per row.
std::vector<std::vector<std::int64_t>> batch_prompts(const Batch& batch);

}  // namespace tdiff
