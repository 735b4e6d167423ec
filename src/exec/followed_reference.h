#pragma once
// The float64 reference along a free-running candidate's own path. An engine's own forward
// follows its own expert and indexer choices; where its scores sit near a tie it may choose
// otherwise than the reference, and from there its numbers are those of another, equally
// valid, path through the model. Judged against the reference's path, every later tensor of
// that token differs, and through attention so do its neighbours': a correct engine FAILs on
// nothing it can fix.
//
// So the reference follows the candidate: every stage is evaluated by the float64 reference
// backend, and after each selection stage the stages that follow read the candidate's choice
// (its ids in the dump, real tokens; padding keeps the reference's own) instead of the
// reference's. Each stage's output on that path is compared with the candidate's tensor as
// it is produced. The selection itself is compared with the choice the reference makes on the
// same path, judged on the flips the candidate's own scores do not explain
// (RoutingMetrics::own_path); everything after it is judged whole, on every real token. Until
// the first token that chose otherwise the inputs equal /reference bit for bit, and those
// stages are read from the case instead of computed.
//
// docs/design/tolerance-model.md § Free-running selections has the three rules side by side.
// Costs one reference forward from the first flip on (tdiff golden's cost at worst); needs the
// model. Without it, or for a stored candidate that lacks a selection stage, diff/divergence.h's
// rule (the diverged tokens' rows judged apart) is the approximation. `tdiff bisect` keeps its
// free mixed runs as they were: there a flip's effect on the watched output is the evidence.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/executor.h"
#include "casefile/session.h"
#include "diff/compare.h"
#include "diff/pairing.h"
#include "exec/candidate_dump.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

struct FollowedCounts {
  std::size_t followed = 0;   // selection stages whose choices the reference took from the candidate
  std::size_t differing = 0;  // of those, the ones where some real token chose otherwise
  std::size_t computed = 0;   // stages the reference evaluated (the rest read from /reference)
};

// The reference's forward along a candidate's path, a stage at a time beside the candidate's
// (a backend's free run: exec/mixed_run.h) or over its stored tensors (a dump).
class FollowedReference {
 public:
  // `rule`: how rows are paired (a dump's real rows); own_path is set. `compare`: the stages
  // whose outputs are compared (globs; empty: all); every stage still runs.
  FollowedReference(CaseSession& session, PairingRule rule, std::string compare, CompareResult& into);
  // Stage `i` of session.stages (stages are stepped in order from 0) on the followed path, its
  // outputs paired with `cand`'s into the result; a selection's choice is `cand`'s from here on.
  void step(std::size_t i, const TensorSide& cand);
  const FollowedCounts& counts() const { return counts_; }

 private:
  bool inputs_clean(const Stage& s) const;
  bool take_stored(const Stage& s, std::vector<Tensor>& out);
  void on_stage(const Stage& s, const std::vector<Tensor>& out);
  bool follow(const Stage& s, std::vector<Tensor>& out);

  CaseSession& session_;
  ReferenceStore& refs_;
  PairingRule rule_;
  std::string compare_;
  CompareResult& into_;
  refcpu::RefCpuBackend reference_;
  RunContext ctx_;
  TensorMap env_;
  std::unique_ptr<Execution> run_;
  const TensorSide* cand_ = nullptr;  // during step()
  FollowedCounts counts_;
  bool stored_ = false;
  // A tensor is "clean" while it equals /reference bit for bit (as in exec/mixed_run.cpp).
  std::set<std::string> clean_ = {"inputs/ids", "inputs/mask", "inputs/pos"};
  std::set<std::string> score_keys_;
  std::map<std::string, Tensor> path_;  // the followed path's scores and choices, by key
};

// Whether a stored candidate can be followed: it holds the output of every selection stage
// of `session` that has a stored reference (`keys`: what it holds).
bool can_follow(const CaseSession& session, const std::vector<std::string>& keys);

// A candidate's stored tensors (a dump, a saved run): the side that reads them, the keys it
// holds, and the rows paired (PairingRule::rows, token_rows; null: all).
struct StoredCandidate {
  TensorSide side;
  std::vector<std::string> keys;
  std::function<RealRows(const Stage&, const Shape&)> rows, token_rows;
};

// A free-running candidate's stored tensors judged against the reference that follows its
// choices. `opt.stages` filters the rows compared.
CompareResult compare_stored_on_followed_path(CaseSession& session, const StoredCandidate& stored, CompareOptions opt,
                                              FollowedCounts& counts);

// A dump's rows as `tdiff run --candidate-dump` and `tdiff ci --candidate-dumps` compare them:
// a free-running dump on the followed path where it can be (`session`, the model, at hand and
// can_follow), else compare_candidate_dump (its diverged tokens apart). `note`: one line on
// how its selections were judged, for the terminal ("" for replayed and isolated dumps).
CompareResult compare_dump(const std::string& case_path, CaseSession* session, const std::vector<Stage>& stages,
                           const CandidateDump& dump, CompareOptions opt, std::string& note);

}  // namespace tdiff
