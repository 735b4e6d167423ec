#pragma once
// The tolerance model: the error a candidate's formats explain, per tensor, that the tolerance
// rule (thresholds.h) judges each measured error against. As Composable Kernel derives its
// tolerances, from the unit roundoff u of each format (2^-p for p significant bits: bf16 2^-8,
// fp16 2^-11, fp32 2^-24, float64 2^-53) and the accumulation length n, relative to the tensor's
// magnitude:
//
//   local(s)^2 = (u_out^2 + u_w^2 + n u_acc^2) / 3
//     u_out  where the stage's outputs are rounded (op_table.h `store`): the policy's storage
//            format, its stream format (the hyper-connection streams), or float32
//     u_w    GEMM kinds: their weights rounded to the storage format (a bf16 port holds bf16
//            weights); 0 otherwise
//     u_acc  float32, the correct accumulator; n the stage's accumulation length
//            (accumulation_length); RoPE tables add (u_acc S)^2: the angle p w (w <= 1, p < S
//            tokens) is a float32 of magnitude up to S, whose rounding moves cos and sin by up
//            to u_acc p w absolute (at 1024 tokens, 6e-5)
//     /3     a rounding error is uniform in [-u, u] relative, of rms u / sqrt(3); independent
//            roundings add in quadrature (the probabilistic analysis of Higham and Mary: the
//            error of an n-term sum grows as sqrt(n) u, not n u)
//   E(t)^2     = local(s)^2 + sum over the float inputs i of E_in(i)^2
//     E_in     the relative error the input carries: its measured rel_l2 where this run
//              compared it, else its own E (modelled), and 0 where the stage read the
//              reference's tensors (isolation) or integer ids; an input from the float64
//              reference (isolation, a mixed run's reference stage) adds u_read^2 / 3, its
//              rounding into the format the candidate reads it in (its producer's)
//   elem(t)    = E(t) sqrt(2 ln n_t): the largest of n_t errors of rms E (Gaussian tail), which
//              err_rel (metrics.h) is judged against
//
// Conditioning: where the case stores the reference's (exec/conditioning.h, written by golden),
// the inherited part is amplified by how sensitive the stage is at the reference's values:
// E(t)^2 = local^2 + G^2 sum E_in^2 for rel_l2, and each row's g for its elements
// (diff/conditioned_error.h). E_in is the larger of an input's rel_l2 and its typical element
// error rel_elem (metrics.h), the error the probes perturb with.
//
// Only the formats the port stores values in enter: the storage format most of its stages
// use and the stream format most of its stream stages use (a preset's, or a policy's global
// setting). They are the port's design; a stage whose override stores differently from the
// rest is judged against the port's format, so a stage that alone stores in 16 bits on a
// float32 port is a finding. Every other knob of the fault catalog (accumulators, softmax statistics, operand
// types such as fp8, top-k comparison, ...) names an arithmetic defect whose error is what
// tdiff exists to show, so the model takes its arithmetic at the correct setting (float32) and
// a fault's extra error stands out against it. Stages run on the reference in a mixed run are
// float64 (u = 2^-53).
#include <cstdint>
#include <vector>

#include "numerics/policy.h"
#include "casefile/session.h"
#include "diff/compare.h"

namespace tdiff {

enum class StageInputs {
  run,        // each stage read the run's own tensors (tdiff run, ci, mixed runs)
  reference,  // each stage read the reference's tensors (isolation: no inherited error)
};

struct ExpectedSetup {
  const CaseSession* session = nullptr;
  const Policy* policy = nullptr;                   // the candidate's
  StageInputs inputs = StageInputs::run;
  const std::vector<bool>* on_candidate = nullptr;  // mixed runs: the stages the candidate ran (null: all)
  // false: inputs carry their modelled E even where the run measured them, so an output is
  // judged end to end against the error the formats explain along the whole path (a bisect's
  // watched output); true: against what its own stage adds to its inputs' measured errors.
  bool measured_inputs = true;
};

double unit_roundoff(DType t);
// The formats the port stores in: the storage format most of its stages use and the stream
// format most of its stream stages use (the coarser one on a tie).
struct PortFormats {
  DType storage = DType::f32, stream = DType::f32;
};
PortFormats port_formats(const std::vector<Stage>& stages, const Policy& policy);
// The number of terms the stage's longest chain of sums adds: the reduction lengths of its
// weights (a GEMM's K, summed over its GEMMs; a norm's width), attention's head width plus
// the keys, the indexer's heads x head width, a pooling window; 1 for elementwise kinds.
std::int64_t accumulation_length(const Stage& s, const CaseSession& session);
// Sets TensorDiff::expected on every float row whose stage is one of the session's.
void set_expected(CompareResult& r, const ExpectedSetup& setup);

}  // namespace tdiff
