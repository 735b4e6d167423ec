#pragma once
// Isolation: one stage run on the reference's own inputs (read from the case's /reference),
// so its output error is the stage's local error, free of everything upstream. Costs one
// stage and no reference recomputation.
#include <vector>

#include "backend/backend.h"
#include "casefile/session.h"

namespace tdiff {

// The reference tensors a stage reads ("inputs/*" from the case inputs), in stage.inputs order.
std::vector<Tensor> reference_inputs(const CaseSession& session, const Stage& stage);
// Runs `stage` on `backend` with the reference's inputs.
std::vector<Tensor> run_isolated(const CaseSession& session, const Stage& stage, Backend& backend, RunContext& ctx);

}  // namespace tdiff
