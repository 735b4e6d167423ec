// An engine, tapped: tdiff's own emu backend stands in for an external implementation. It
// runs a case's inputs stage by stage (its own choices everywhere, as a real engine does) and
// writes every stage output through the tap (src/tap/tap.hpp), then
//
//   tdiff run case.h5 --candidate-dump dump.h5
//
// judges the dump; its rows equal those of `tdiff run case.h5 --backend emu --policy POLICY
// --seed SEED --selections free`. With `replay`, after each selection stage it writes its own
// choice and takes the reference's from the case (tap.reference_raw), as
// `--selections replay` does. With `isolated`, each stage runs on the reference's inputs
// from the case instead (its local error; ranked as `tdiff bisect --mode isolate --floor none`
// ranks the emu backend). An engine of your own does the same with its tensors: copy each
// stage's output to the host and tap.write it under the stage's name.
//
// usage: tap_emu CASE POLICY SEED OUT.h5 [run|replay|isolated]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "bisect/isolate.h"
#include "backend/executor.h"
#include "numerics/policy.h"
#include "casefile/session.h"
#include "exec/backend_registry.h"
#include "model/op_table.h"
#include "model/tensor_contract.h"
#include "tap/tap.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc == 6 ? argv[5] : "run";
  if ((argc != 5 && argc != 6) || (mode != "run" && mode != "replay" && mode != "isolated")) {
    std::fprintf(stderr, "usage: %s CASE POLICY SEED OUT.h5 [run|replay|isolated]\n", argv[0]);
    return 2;
  }
  try {
    tdiff::CaseSession session = tdiff::open_session(argv[1]);
    tdiff::Policy policy = tdiff::Policy::load(argv[2]);
    policy.validate(session.stages);
    const auto seed = std::strtoull(argv[3], nullptr, 10);
    auto engine = tdiff::make_backend("emu", policy, {seed});

    tdiff::Tap tap(argv[4], mode);
    tap.on_case(argv[1]);
    tap.attr("engine", "tdiff emu via examples/tap/tap_emu.cpp");
    tap.attr("policy", policy.describe());
    tap.attr("seed", std::to_string(seed));
    tdiff::RunContext ctx = session.context();
    auto write = [&](const tdiff::Stage& s, const std::vector<tdiff::Tensor>& out) {
      for (std::size_t k = 0; k < out.size(); ++k)
        tap.write_raw(s.name + "/" + s.outputs[k], std::string(tdiff::dtype_name(out[k].dtype())), out[k].raw(),
                      out[k].shape());
    };
    if (mode == "isolated") {
      for (const auto& s : session.stages) write(s, tdiff::run_isolated(session, s, *engine, ctx));
    } else {
      tdiff::TensorMap env;
      tdiff::put_inputs(session.info.batch, env);
      tdiff::ExecutorHooks hooks;
      hooks.on_stage = [&](const tdiff::Stage& s, std::size_t, const std::vector<tdiff::Tensor>& out) { write(s, out); };
      // Replay: a selection's own choice is written (on_stage), the reference's read by the stages after it.
      if (mode == "replay")
        hooks.replace = [&](const tdiff::Stage& s, std::size_t, std::vector<tdiff::Tensor>& out) {
          if (!tdiff::op_info(s.kind).selection) return false;
          for (const auto& name : s.outputs) {
            const tdiff::Shape shape = session.contract().find(s.name + "/" + name)->shape();
            tdiff::Tensor t(tdiff::DType::i64, shape);
            tap.reference_raw(s.name + "/" + name, "i64", t.raw(), shape);
            out.push_back(std::move(t));
          }
          return true;
        };
      tdiff::execute(session.stages, [&](const tdiff::Stage&) -> tdiff::Backend& { return *engine; }, ctx, env, hooks);
    }
    tap.close();
    fmt::print("{}: {} stages tapped\n", argv[4], session.stages.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tap_emu: %s\n", e.what());
    return 2;
  }
}
