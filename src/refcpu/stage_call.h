#pragma once
// The refcpu dispatch (backend/handler_table.h): each family file registers the handlers of its
// operator kinds, so RefCpuBackend::run is a lookup and a new kind is one registration.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/handler_table.h"

namespace tdiff::refcpu {

// What a handler gets (StageCall in emu and hip too): the stage, its inputs (float inputs
// already widened to float64) and the run, with the batch sizes every handler needs.
struct StageCall {
  const Stage& s;
  const std::vector<const Tensor*>& in;
  RunContext& ctx;
  const ModelConfig& c;
  const Batch& batch;
  std::int64_t B, S, N;  // batch rows, sequence length, tokens B·S

  const double* f64(std::size_t i) const;  // input i as float64 (a logic_error for any other dtype)
  const std::int64_t* i64(std::size_t i) const { return in[i]->data<std::int64_t>(); }
  const std::uint8_t* u8(std::size_t i) const { return in[i]->data<std::uint8_t>(); }
  const Tensor& weight(std::size_t i) const { return ctx.weights.f64(s.weights.at(i)); }
  // Whether weight i is too large to convert whole (WeightStore::streamed): products then
  // stream it by tiles (linear_streamed) and the embedding converts only the rows it reads.
  bool streamed(std::size_t i) const { return ctx.weights.streamed(s.weights.at(i)); }
  // Rows [r0, r1) of weight i as float64, converted now (for linear_streamed).
  void weight_rows(std::size_t i, std::int64_t r0, std::int64_t r1, double* dst) const {
    ctx.weights.rows_f64(s.weights.at(i), r0, r1, dst);
  }
};

using Handlers = HandlerTable<StageCall>;

// `s` with its last dimension replaced.
Shape with_last(Shape s, std::int64_t last);
// Rows of a tensor when its last `trailing` dims are the row.
std::int64_t rows_of(const Tensor& t, int trailing = 1);

// One per family file, each registering exactly its kinds.
void register_embedding(Handlers& t);         // embed
void register_hyper_connection(Handlers& t);  // hc_expand, hc_mix, hc_sinkhorn, hc_pre, hc_post, hc_head
void register_rope(Handlers& t);              // rope_table, rope, entry_rope, rope_inverse
void register_mask(Handlers& t);              // window_mask, cmp_mask
void register_norm(Handlers& t);              // rms_norm, head_rms_norm
void register_linear(Handlers& t);            // linear, grouped_linear, lm_head
void register_compressor(Handlers& t);        // cmp_proj, pool
void register_indexer(Handlers& t);           // idx_weights, idx_score, idx_topk
void register_attention(Handlers& t);         // attention
void register_moe(Handlers& t);               // router, moe_select, moe_weights, moe_experts, moe_shared, add

}  // namespace tdiff::refcpu
