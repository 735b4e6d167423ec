#pragma once
// What every candidate backend knows about the stage it runs (emu's StageCall and hip's derive
// from it): the stage, its inputs and run context, its numerics resolved from the policy, the
// storage and stream formats, its identity for run-dependent orders, the batch dimensions
// and ε. emu is the specification, so the derivation is written once here.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

struct StageFacts {
  StageFacts(const Policy& policy, std::uint64_t run_seed, const Stage& s, const std::vector<const Tensor*>& in,
             RunContext& ctx)
      : s(s),
        in(in),
        ctx(ctx),
        c(ctx.config),
        batch(ctx.batch),
        num(policy.resolve(s.name)),
        split(policy.split()),
        st(fmt_of(num.storage)),
        sf(fmt_of(num.stream)),
        seed(stage_hash(s.name, run_seed)),
        B(ctx.batch.rows()),
        S(ctx.batch.seq()),
        N(B * S),
        eps(static_cast<float>(ctx.config.rms_norm_eps)) {}

  const Stage& s;
  const std::vector<const Tensor*>& in;
  RunContext& ctx;
  const ModelConfig& c;
  const Batch& batch;
  const Numerics num;
  const Split split;           // the run's split across devices (tp = ep = 1: none)
  const Fmt st, sf;            // storage and stream formats
  const std::uint64_t seed;    // stage identity for run-dependent orders (stage_hash)
  const std::int64_t B, S, N;  // batch rows, sequence, tokens
  const float eps;             // rms_norm_eps

  // Whether the MoE runs tensor-parallel here (tp > 1 without expert parallelism).
  bool moe_tensor_parallel() const { return split.tp > 1 && split.ep == 1; }
  // Whether this stage is the row-parallel linear of a tensor-parallel split (RowParallelLinear:
  // attn.o_b, whose K is the o_a outputs of the rank's groups); every other linear is
  // replicated or column-parallel, which leaves each output's sum whole.
  bool row_parallel() const { return split.tp > 1 && s.op_class == "attn.o_b"; }
};

}  // namespace tdiff::emu
