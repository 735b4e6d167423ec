#pragma once
// The precision audit (docs/design/design.md §4, "our version of the paper's table"): for every knob
// of the fault catalog, on top of a base policy,
//   local       the error of the stages the knob touches, each run in isolation on the
//               reference's own inputs (bisect/isolate.h), with the knob at its bad and at its
//               good setting, and the improvement factor bad / good;
//   end to end  a full candidate run at each setting: the logits against the reference
//               (relative L2 error, cosine, top-1 agreement);
//   run to run  two full runs with different run seeds: how many stage outputs differ bit for
//               bit, and how many tokens' selections (experts, indexer entries) differ.
// Local error of floating-point stages: the geometric mean over the touched tensors of their
// relative L2 error |c - r| / |r| (finite elements; exact tensors floored at 1e-16), so the
// factor bad / good is the typical per-tensor factor; plus a count of the NaN/Inf the
// candidate adds. Selection stages (top-k): tokens whose selection differs from the
// reference's, ties included.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "casefile/session.h"
#include "diff/compare.h"

namespace tdiff {

// The touched stages of one candidate, each in isolation, against the reference.
struct LocalError {
  std::vector<TensorDiff> rows;        // every output of every touched stage, model order
  double rel_l2 = 0.0;                 // geometric mean over the floating-point tensors (0 when none)
  std::int64_t nonfinite = 0;          // NaN/Inf the candidate adds
  std::int64_t float_tensors = 0;      // floating-point tensors pooled
  std::int64_t selection_tokens = 0;   // selection stages: tokens differing from the reference
  std::int64_t selection_flips = 0;    // choices swapped, summed over tokens
  std::int64_t selection_tensors = 0;
};
// Runs every stage of `session` whose kind is in `kinds` (all stages when empty) on
// `candidate` with the reference's inputs. `inputs` may replace a stage's reference inputs
// (tests build range-edge inputs with it): it returns false to keep them.
using InputHook = std::function<bool(const Stage&, std::vector<Tensor>& inputs, std::vector<Tensor>& ref_outputs)>;
LocalError local_error(const CaseSession& session, Backend& candidate, const std::vector<OpKind>& kinds,
                       RunContext& ctx, const InputHook& inputs = {});

// A full candidate run compared with the reference at the logits, with a fingerprint of every
// stage output for run-to-run comparisons.
struct FullRun {
  TensorDiff logits;                                // lm_head/logits against the reference
  std::map<std::string, std::uint64_t> fingerprint;  // "stage/tensor" -> hash of its bytes
  NamedTensors selections;                          // moe.select and idx.topk outputs
};
FullRun full_run(CaseSession& session, Backend& candidate, RunContext& ctx);

// Run-to-run differences of two full runs.
struct RunToRun {
  std::int64_t tensors_differ = 0;      // stage outputs that are not bit-identical
  std::int64_t tensors = 0;
  std::int64_t selection_tokens = 0;    // tokens whose selection differs between the runs
  std::string first_differing;          // first differing output in model order ("" when none)
};
RunToRun run_to_run(const FullRun& a, const FullRun& b, const std::vector<Stage>& stages);

// One side (bad or good setting) of a knob's row.
struct AuditSide {
  std::string setting;  // the knob's value
  LocalError local;
  bool ran_full = false;
  FullRun full;         // seed A (only logits and selections kept)
  RunToRun r2r;
};

struct AuditRow {
  KnobInfo knob;
  bool selection = false;        // every touched stage is a top-k selection
  std::int64_t touched = 0;      // touched stages in this model
  std::string skipped;           // why the knob was not measured ("" when it was)
  AuditSide bad, good;
  // Local improvement factor: bad / good (rel_l2, or selection tokens); +inf when good is 0
  // and bad is not, 1 when both are 0, +inf when the bad side adds NaN/Inf and good does not.
  double factor = 1.0;
};

struct AuditOptions {
  std::vector<std::string> knobs;  // empty: the whole catalog
  bool full_runs = true;           // end-to-end and run-to-run columns
  std::uint64_t seed_a = 1, seed_b = 2;
  std::function<void(const std::string& what)> progress;
};

struct AuditResult {
  std::string backend;         // the candidate's name (Backend::name)
  std::string policy;          // the base policy's description
  std::vector<AuditRow> rows;  // catalog order
  double seconds = 0.0;
};

// Makes the candidate of one policy and run seed: emu, or hip (app/candidate.h's make_candidate).
// The audit makes one per setting and seed, as a user's runs would.
using CandidateFactory = std::function<std::unique_ptr<Backend>(const Policy& policy, std::uint64_t seed)>;

// `base`: the policy every knob is flipped on (usually fixed). A knob whose operator kinds
// the candidate does not implement is skipped (AuditRow::skipped says why). InputError for an
// unknown knob name.
AuditResult run_audit(CaseSession& session, const Policy& base, const CandidateFactory& make_candidate,
                      const AuditOptions& opt);

// The factor of a row from its two sides (see AuditRow::factor).
double audit_factor(const AuditSide& bad, const AuditSide& good, bool selection);

}  // namespace tdiff
