#pragma once
// What an emu handler gets for one stage (backend/handler_table.h): the stage, its inputs, the
// run context, the stage's resolved numerics and the backend's weight cache. Handlers live in
// the family files (attention.cpp, moe.cpp, ...), each registering its kinds with
// register_<family>(); emu_backend.cpp builds the table from them.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/handler_table.h"
#include "numerics/policy.h"
#include "emu/gemm.h"
#include "emu/numerics.h"
#include "emu/stage_facts.h"

namespace tdiff::emu {

class EmuBackend;

struct StageCall : StageFacts {
  StageCall(EmuBackend& be, const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx);

  // Input i as the kernel reads it: float values in the storage format f (a float64 tensor
  // from the reference is converted at the boundary).
  std::vector<float> load(std::size_t i, Fmt f) const;
  std::vector<float> load_f32(std::size_t i) const { return load(i, Fmt::f32); }
  const Tensor& weight(std::size_t i) const { return ctx.weights.f64(s.weights.at(i)); }
  // Weight i rounded to a GEMM input format (cached by the backend).
  const std::vector<float>& gemm_weight(std::size_t i, Fmt in);
  // The stage's outputs computed by refcpu (integer logic: identical in every backend).
  std::vector<Tensor> refcpu_outputs();
  // The split's all-reduce of the ranks' partials (each already in the storage format).
  std::vector<float> all_reduce(const std::vector<std::vector<float>>& partials);
  // A MoE branch's rank partials: reduced now (moe_reduce=reduce_each), or kept for moe.out and
  // returned as their float64 sum, the branch's value before any reduction (sum_then_reduce).
  Tensor keep_or_reduce(const std::string& tensor, const std::vector<std::vector<float>>& partials, Shape shape);

  EmuBackend& be;
};

using Handlers = HandlerTable<StageCall>;

// Float values as a float64 tensor of `shape`.
Tensor store(const std::vector<float>& v, Shape shape);
// A float64 weight as float32.
std::vector<float> to_float(const Tensor& w);
std::int64_t rows_of(const Tensor& t);
// x [rows, K] in storage -> the GEMM operand of format `in` (rounded in place; fp8: 1x128 groups).
std::vector<float> operand(std::vector<float> x, std::int64_t rows, std::int64_t K, Fmt in);

// One per operator family (the family names of the operator table).
void register_embedding(Handlers& h);
void register_hyper_connection(Handlers& h);
void register_rope(Handlers& h);
void register_mask(Handlers& h);
void register_norm(Handlers& h);
void register_linear(Handlers& h);
void register_compressor(Handlers& h);
void register_indexer(Handlers& h);
void register_attention(Handlers& h);
void register_moe(Handlers& h);

}  // namespace tdiff::emu
