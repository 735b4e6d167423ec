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
//        tap_emu --request POLICY   (as tdiff runs it: `tdiff bisect case.h5 --candidate-cmd
//                                    'tap_emu --request fixed'`; the request file in
//                                    $TDIFF_REQUEST names the case, the dump, the stages taken
//                                    from the reference and the run seed)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "bisect/isolate.h"
#include "backend/executor.h"
#include "numerics/policy.h"
#include "casefile/engine_request.h"
#include "casefile/session.h"
#include "exec/backend_registry.h"
#include "model/op_table.h"
#include "model/tensor_contract.h"
#include "tap/tap.hpp"

namespace {

// The reference's tensor of `name` as the tap hands it (floats as f64, ids as i64, masks as bool).
tdiff::Tensor from_reference(tdiff::Tap& tap, const tdiff::CaseSession& session, const std::string& name, bool substitute,
                             bool& taken) {
  const tdiff::TensorSpec& spec = *session.contract().find(name);
  const tdiff::DType dt = spec.value == tdiff::ValueClass::floating ? tdiff::DType::f64
                          : spec.value == tdiff::ValueClass::index  ? tdiff::DType::i64
                                                                    : tdiff::DType::boolean;
  tdiff::Tensor t(dt, spec.shape());
  const std::string dtype(tdiff::dtype_name(dt));
  if (substitute) taken = tap.substitute_raw(name, dtype, t.raw(), spec.shape());
  else tap.reference_raw(name, dtype, t.raw(), spec.shape());
  return t;
}

// The forward stage by stage, every output written through the tap. Replay: after a
// selection its own choice is written and the reference's read by the stages after it. A
// request's substituted stages are the reference's outputs, not computed.
void forward(tdiff::Tap& tap, tdiff::CaseSession& session, tdiff::Backend& engine, const std::string& mode) {
  tdiff::RunContext ctx = session.context();
  auto write = [&](const tdiff::Stage& s, const std::vector<tdiff::Tensor>& out) {
    for (std::size_t k = 0; k < out.size(); ++k)
      tap.write_raw(s.name + "/" + s.outputs[k], std::string(tdiff::dtype_name(out[k].dtype())), out[k].raw(),
                    out[k].shape());
  };
  if (mode == "isolated") {
    for (const auto& s : session.stages) write(s, tdiff::run_isolated(session, s, engine, ctx));
    return;
  }
  tdiff::TensorMap env;
  tdiff::put_inputs(session.info.batch, env);
  tdiff::ExecutorHooks hooks;
  hooks.on_stage = [&](const tdiff::Stage& s, std::size_t, const std::vector<tdiff::Tensor>& out) { write(s, out); };
  hooks.cached = [&](const tdiff::Stage& s, std::size_t, std::vector<tdiff::Tensor>& out) {
    bool taken = false;
    for (const auto& name : s.outputs) {
      out.push_back(from_reference(tap, session, s.name + "/" + name, true, taken));
      if (!taken) break;
    }
    if (!taken) out.clear();
    return taken;
  };
  if (mode == "replay")
    hooks.replace = [&](const tdiff::Stage& s, std::size_t, std::vector<tdiff::Tensor>& out) {
      if (!tdiff::op_info(s.kind).selection) return false;
      bool unused = false;
      for (const auto& name : s.outputs) out.push_back(from_reference(tap, session, s.name + "/" + name, false, unused));
      return true;
    };
  tdiff::execute(session.stages, [&](const tdiff::Stage&) -> tdiff::Backend& { return engine; }, ctx, env, hooks);
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s CASE POLICY SEED OUT.h5 [run|replay|isolated]\n       %s --request POLICY\n",
               argv0, argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const bool request = argc == 3 && std::string(argv[1]) == "--request";
  const std::string mode = argc == 6 ? argv[5] : "run";
  if (!request && ((argc != 5 && argc != 6) || (mode != "run" && mode != "replay" && mode != "isolated")))
    return usage(argv[0]);
  try {
    // A request (tdiff ... --candidate-cmd 'tap_emu --request POLICY') names the case, dump and seed.
    const char* env = std::getenv(tdiff::kEngineRequestEnv);
    const tdiff::EngineRequest asked = request ? tdiff::read_engine_request(env ? env : "") : tdiff::EngineRequest{};
    const std::string case_path = request ? asked.case_path : argv[1];
    tdiff::CaseSession session = tdiff::open_session(case_path);
    tdiff::Policy policy = tdiff::Policy::load(argv[2]);
    policy.validate(session.stages);
    const auto seed = request ? asked.seed : std::strtoull(argv[3], nullptr, 10);
    auto engine = tdiff::make_backend("emu", policy, {seed});

    tdiff::Tap tap = request ? tdiff::Tap::from_request() : tdiff::Tap(argv[4], mode);
    if (!request) tap.on_case(case_path);
    tap.attr("engine", "tdiff emu via examples/tap/tap_emu.cpp");
    tap.attr("policy", policy.describe());
    tap.attr("seed", std::to_string(seed));
    forward(tap, session, *engine, request ? asked.mode : mode);
    tap.close();
    fmt::print("{}: {} stages tapped\n", request ? "request" : argv[4], session.stages.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tap_emu: %s\n", e.what());
    return 2;
  }
}
