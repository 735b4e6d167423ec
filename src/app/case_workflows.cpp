#include "app/case_workflows.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "backend/executor.h"
#include "base/file_lock.h"
#include "base/error.h"
#include "base/file_seal.h"
#include "casefile/h5_common.h"
#include "casefile/env_record.h"
#include "casefile/reference_layers.h"
#include "exec/greedy.h"
#include "model/pattern.h"
#include "refcpu/linear.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::app {

void check_case_target(const std::string& out, bool replace) {
  std::error_code ec;
  if (replace || !std::filesystem::exists(std::filesystem::symlink_status(out, ec))) return;
  input_error("{}: already exists (a case's reference and recorded runs would be lost); pass --force to replace it, "
              "or choose another -o",
              out);
}

CaseInfo make_case(const CaseRequest& request, const std::string& out, ChecksumReport* checksums) {
  check_case_target(out, request.replace);
  CaseInfo info = case_for_model(request.model_dir);
  info.batch = pad_prompts(request.prompts, request.pad_to, request.pad_left, info.config.vocab_size);
  info.seed = request.seed;
  info.pad_to = request.pad_to;
  info.pad_side = request.pad_left ? "left" : "right";
  info.prompts = request.prompts.lines;
  if (request.generate > 0) {
    if (request.decode > 0) input_error("--generate and --decode: the decoded tokens are either chosen or given");
    WeightStore weights(request.model_dir, info.config);
    const Tensor ids = greedy_generate(info.config, weights, info.batch, request.generate, request.chunks, request.on_token);
    Tensor mask(DType::u8, ids.shape());
    std::fill_n(mask.data<std::uint8_t>(), mask.numel(), std::uint8_t{1});
    info.batch = Batch::make(ids, mask, info.config.vocab_size, out);
    info.schedule = Schedule::make(info.batch, request.generate, request.chunks, "--generate/--prefill-chunks");
  } else if (request.decode > 0 || !request.chunks.empty()) {
    info.schedule = Schedule::make(info.batch, request.decode, request.chunks, "--decode/--prefill-chunks");
  }
  ChecksumOptions hashing;
  hashing.rehash = request.rehash;
  const ChecksumReport report = add_weight_checksums(info, hashing);
  if (checksums) *checksums = report;
  create_case(out, info);
  return info;
}

Sealed seal_case(const std::string& path) {
  FileLock lock(path, "tdiff case seal");  // an update like any other: not while another command makes one
  Sealed out;
  const auto previous = h5::case_check();
  struct Restore {
    h5::CaseCheck mode;
    ~Restore() { h5::set_case_check(mode); }
  } restore{previous};
  // The damage the record reports is what the user says was intended: read past it, the way
  // every command reads a case, so that only a file that still reads as a case is sealed.
  const auto before = check_seal(path, true);
  out.was = !before ? "unsealed" : before->damage;
  h5::set_case_check(h5::CaseCheck::off);
  (void)read_case(path);
  (void)h5_list_datasets(path, "/");
  (void)read_env_records(path);
  (void)reference_stages(path);
  H5Writer w(path, path, H5Writer::Copy::bytes);
  w.commit();
  h5::set_case_check(h5::CaseCheck::full);
  (void)read_case(path);  // the new record, checked as the next command will
  std::error_code ec;
  out.bytes = std::filesystem::file_size(path, ec);
  return out;
}

namespace {

// The stage's conditioning at the reference's values, probed on its inputs in `env` (the
// executor calls on_stage before it drops them).
void store_conditioning(const Stage& s, const std::vector<Tensor>& out, const TensorMap& env, Backend& ref,
                        RunContext& ctx, int probes, CaseUpdate& update, ReferenceWritten& written) {
  if (probes <= 0 || !op_info(s.kind).compute()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const Tensor*> inputs;
  for (const auto& in : s.inputs) inputs.push_back(&env.at(in.key()));
  const auto cond = probe_conditioning(s, inputs, out, ref, ctx, probes);
  for (std::size_t k = 0; k < cond.size(); ++k)
    if (cond[k]) update.put_conditioning(s.name, s.outputs[k], *cond[k]), ++written.conditioned;
  written.conditioning_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What /reference holds after this golden: every stage, the boundaries (and what --stages
// adds), or a chosen subset; a golden of some stages over a kept reference keeps its kind.
std::string store_kind_after(const CaseSession& session, const ReferenceRequest& request, bool cleared) {
  if (request.boundaries) return kStoreBoundaries;
  if (request.stages.empty()) return kStoreAll;
  if (!cleared && !reference_stages(session.path).empty()) {
    const auto attrs = h5_read_attrs(session.path, "/reference");
    if (const auto it = attrs.find("store"); it != attrs.end()) return it->second;
    // Written before the attribute: what it holds says which.
    return reference_stages(session.path).size() == session.stages.size() ? kStoreAll : kStoreStages;
  }
  return kStoreStages;
}

}  // namespace

ReferenceWritten write_reference(CaseSession& session, const ReferenceRequest& request) {
  RunContext ctx = session.context(request.tie_rule);
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(session.info.batch, env);
  CaseUpdate update(session.path);
  ReferenceWritten written;
  written.stages = session.stages.size();
  const bool cleared = request.boundaries || request.stages.empty() || !request.keep_others;
  written.store = store_kind_after(session, request, cleared);
  std::set<std::string> boundaries;
  if (request.boundaries)
    for (auto& name : boundary_stages(session.stages)) boundaries.insert(std::move(name));
  auto stores = [&](const std::string& stage) {
    if (request.boundaries)
      return boundaries.count(stage) || (!request.stages.empty() && pattern_matches(request.stages, stage));
    return pattern_matches(request.stages, stage);
  };
  if (cleared) {
    update.clear_reference();
  } else {
    for (const auto& stage : reference_stages(session.path)) {
      if (pattern_matches(request.stages, stage)) {
        update.writer().remove("/reference/" + stage);
        update.writer().remove("/conditioning/" + stage);  // rewritten with the stage
      } else {
        ++written.kept;
      }
    }
  }
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t i, const std::vector<Tensor>& out) {
    if (request.progress) request.progress(i, s);
    // A recomputed stage is judged with the conditioning a full reference stores beside it.
    if (request.boundaries) store_conditioning(s, out, env, ref, ctx, request.conditioning_probes, update, written);
    if (!stores(s.name)) return;
    ++written.stored_stages;
    for (std::size_t k = 0; k < out.size(); ++k, ++written.tensors) update.put_reference(s.name, s.outputs[k], out[k]);
    if (!request.boundaries) store_conditioning(s, out, env, ref, ctx, request.conditioning_probes, update, written);
  };
  const auto t0 = std::chrono::steady_clock::now();
  execute(session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
  written.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  written.run_id = make_run_id("golden");
  const std::string rule = tie_rule_name(request.tie_rule);
  EnvRecord rec = capture_env("refcpu", "float64", process_command_line());
  rec.extra["tie_rule"] = rule;
  rec.extra["blas"] = refcpu::blas_core();
  rec.extra["stages"] = request.stages.empty() ? "*" : request.stages;
  rec.extra["store"] = written.store;
  if (written.kept) rec.extra["kept"] = fmt::format("{} stored stages of {}", written.kept, update.reference_id());
  add_case_facts(rec, session.path, session.info.checksums);
  if (!request.weights_note.empty()) rec.extra["weights"] = request.weights_note;
  update.put_env(written.run_id, rec);
  if (request.before_commit) request.before_commit(update);
  update.writer().set_attr("/reference", "tie_rule", rule);
  update.writer().set_attr("/reference", "env", written.run_id);
  update.writer().set_attr("/reference", "store", written.store);
  update.commit();
  return written;
}

}  // namespace tdiff::app
