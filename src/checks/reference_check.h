#pragma once
// tdiff golden --verify: this build's float64 reference against the one stored in a case,
// stage by stage on the stored inputs (every stage reads the stored outputs of the stages
// before it), so each number is that operator's own difference, not one carried through the
// layers. What a reference made by another build, or on another machine, differs by: OpenBLAS
// picks its kernels by CPU, so the last bits of a reference are the machine's.
#include <functional>
#include <string>
#include <vector>

#include "casefile/session.h"
#include "checks/determinism.h"

namespace tdiff {

struct ReferenceDiff {
  std::string stage, tensor;
  BitDiff bits;          // elements whose bytes differ, and the largest |difference|
  bool integer = false;  // ids, selections, masks: must agree exactly
  double rel_l2 = 0.0;   // float tensors: ||new − stored|| / ||stored|| over finite entries
};

// Every stage of the session (which must hold a full reference) recomputed by refcpu from the
// stored inputs; `on_stage` reports progress. InputError when a stage has no stored reference.
std::vector<ReferenceDiff> check_reference(CaseSession& session, TieRule rule,
                                           const std::function<void(std::size_t, const Stage&)>& on_stage = {});

}  // namespace tdiff
