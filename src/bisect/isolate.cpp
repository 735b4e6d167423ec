#include "bisect/isolate.h"

#include "base/error.h"

namespace tdiff {

std::vector<Tensor> reference_inputs(const CaseSession& session, const Stage& stage) {
  std::vector<Tensor> in;
  for (const auto& ref : stage.inputs) {
    if (ref.stage == "inputs") {
      const Batch& b = session.info.batch;
      in.push_back(ref.tensor == "ids" ? b.ids : ref.tensor == "mask" ? b.mask : b.pos);
      continue;
    }
    if (!session.reference().has(ref.stage, ref.tensor))
      input_error("{}: stage {} needs /reference/{} (run `tdiff golden {}` without --stages)", session.path, stage.name,
                  ref.key(), session.path);
    in.push_back(session.reference().get(ref.stage, ref.tensor));
  }
  return in;
}

std::vector<Tensor> run_isolated(const CaseSession& session, const Stage& stage, Backend& backend, RunContext& ctx) {
  const std::vector<Tensor> in = reference_inputs(session, stage);
  std::vector<const Tensor*> ptrs;
  for (const auto& t : in) ptrs.push_back(&t);
  return backend.run(stage, ptrs, ctx);
}

}  // namespace tdiff
