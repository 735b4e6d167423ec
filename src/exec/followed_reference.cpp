#include "exec/followed_reference.h"

#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "backend/executor.h"
#include "diff/divergence.h"
#include "diff/pairing.h"
#include "diff/real_rows.h"
#include "diff/selection_scores.h"
#include "exec/saved_run.h"
#include "model/op_table.h"
#include "model/pattern.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {

namespace {

bool selection(const Stage& s) { return op_info(s.kind).selection; }

}  // namespace

FollowedReference::FollowedReference(CaseSession& session, PairingRule rule, std::string compare, CompareResult& into)
    : session_(session), refs_(session.reference()), rule_(std::move(rule)), compare_(std::move(compare)), into_(into),
      ctx_(session.context()) {
  if (!compare_.empty()) select_stages(compare_, session.stages);
  rule_.own_path = true;
  for (const auto& s : session.stages)
    if (const std::string k = selection_scores_key(s).key; !k.empty()) score_keys_.insert(k);
  put_inputs(session.info.batch, env_);
  ExecutorHooks h;
  h.cached = [this](const Stage& s, std::size_t, std::vector<Tensor>& out) { return take_stored(s, out); };
  h.on_stage = [this](const Stage& s, std::size_t, const std::vector<Tensor>& out) { on_stage(s, out); };
  h.replace = [this](const Stage& s, std::size_t, std::vector<Tensor>& out) { return follow(s, out); };
  run_ = std::make_unique<Execution>(session.stages, [this](const Stage&) -> Backend& { return reference_; }, ctx_, env_, h);
}

void FollowedReference::step(std::size_t i, const TensorSide& cand) {
  if (i != run_->next()) throw std::logic_error(fmt::format("FollowedReference: stage {} stepped out of order", i));
  cand_ = &cand;
  run_->step();  // the reference backend is synchronous: on_stage has run
  cand_ = nullptr;
}

bool FollowedReference::inputs_clean(const Stage& s) const {
  for (const auto& in : s.inputs)
    if (!clean_.count(in.key())) return false;
  return true;
}

// Clean inputs: the reference's own tensors. A selection always runs (it is cheap), so that the
// replace hook hands on the candidate's choice.
bool FollowedReference::take_stored(const Stage& s, std::vector<Tensor>& out) {
  stored_ = false;
  if (selection(s) || !inputs_clean(s) || !refs_.has_stage(s.name)) return false;
  for (const auto& t : s.outputs) out.push_back(refs_.get(s.name, t));
  stored_ = true;
  return true;
}

void FollowedReference::on_stage(const Stage& s, const std::vector<Tensor>& out) {
  if (!stored_) ++counts_.computed;
  if (inputs_clean(s))
    for (const auto& t : s.outputs) clean_.insert(s.name + "/" + t);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::string key = s.name + "/" + s.outputs[k];
    if (score_keys_.count(key) || selection(s)) path_[key] = out[k];
  }
  if (!pattern_matches(compare_, s.name) || !refs_.has_stage(s.name)) return;
  const TensorSide ref{into_.label_ref, session_.path + ":/reference (followed) ",
                       [&](const std::string& key, const Tensor*) {
                         for (std::size_t k = 0; k < out.size(); ++k)
                           if (key == s.name + "/" + s.outputs[k]) return out[k];
                         const auto it = path_.find(key);
                         return it == path_.end() ? Tensor() : it->second;
                       },
                       [&](const std::string& key) { return refs_.conditioning(key); }};
  pair_stage(s, ref, *cand_, rule_, into_);
}

// After a selection: the candidate's choice. Where only real rows are judged (a dump: whatever
// it holds on padding is the implementation's own), the reference's own on padding.
bool FollowedReference::follow(const Stage& s, std::vector<Tensor>& out) {
  if (!selection(s)) return false;
  const std::string key = s.name + "/" + s.outputs.front();
  const Tensor own = path_.at(key).to(DType::i64);
  const Tensor read = cand_->read(key, &own);
  if (!read.defined()) return false;  // not held: the reference's own choice (can_follow says when)
  const Tensor theirs = (read.shape() == own.shape() ? read : read.reshaped(own.shape())).to(DType::i64);
  Tensor merged = rule_.rows ? own.clone() : theirs;
  const RealRows rows = real_rows(own.shape(), session_.info.batch, 0);
  const std::size_t row_bytes = static_cast<std::size_t>(rows.row_size) * sizeof(std::int64_t);
  for (std::int64_t r = 0; rule_.rows && r < rows.rows; ++r)
    if (rows.real[static_cast<std::size_t>(r)])
      std::memcpy(merged.raw() + r * row_bytes, theirs.raw() + r * row_bytes, row_bytes);
  ++counts_.followed;
  if (std::memcmp(merged.raw(), own.raw(), merged.nbytes()) != 0) {
    ++counts_.differing;
    clean_.erase(key);
  }
  path_[key] = merged;  // what the stages after it read, and the experts' slices
  out.push_back(std::move(merged));
  return true;
}

bool can_follow(const CaseSession& session, const std::vector<std::string>& keys) {
  const std::set<std::string> held(keys.begin(), keys.end());
  for (const auto& s : session.stages)
    if (selection(s) && session.reference().has_stage(s.name) && !held.count(s.name + "/" + s.outputs.front()))
      return false;
  return true;
}

CompareResult compare_stored_on_followed_path(CaseSession& session, const StoredCandidate& stored, CompareOptions opt,
                                              FollowedCounts& counts) {
  const Batch& batch = session.info.batch;
  const ModelConfig& config = session.info.config;
  std::vector<std::string> order;
  for (const auto& s : session.stages) order.push_back(s.name);
  CompareResult r;
  r.label_ref = session.path + ":/reference, following the candidate's selections";
  r.label_cand = stored.side.label;
  PairingRule rule;
  const std::string compare = opt.stages;
  rule.opt = std::move(opt);
  rule.opt.stage_order = order;
  rule.opt.contract = &session.contract();
  // A generation's tokens against the path the candidate took (its own selections followed).
  rule.opt.generation_rows = session.info.schedule.predicting_rows(session.info.batch.seq());
  rule.weights = session.weights.get();
  rule.rows = stored.rows;
  rule.token_rows = stored.token_rows;
  const std::set<std::string> held(stored.keys.begin(), stored.keys.end());
  TensorSide cand = stored.side;
  cand.read = [&held, read = stored.side.read](const std::string& key, const Tensor* like) {
    return held.count(key) ? read(key, like) : Tensor();
  };
  {
    FollowedReference followed(session, std::move(rule), compare, r);
    for (std::size_t i = 0; i < session.stages.size(); ++i) followed.step(i, cand);
    counts = followed.counts();
  }
  r.padding_tokens = padding_tokens(batch);
  r.locator = std::make_shared<const Locator>(session.stages, config, batch);
  std::vector<std::string> only_cand;
  for (const auto& k : stored.keys)
    if (const auto [stage, tensor] = split_key(k); !session.reference().has(stage, tensor)) only_cand.push_back(k);
  r.only_cand = order_keys(only_cand, order);
  return r;
}

CompareResult compare_dump(const std::string& case_path, CaseSession* session, const std::vector<Stage>& stages,
                           const CandidateDump& dump, CompareOptions opt, std::string& note) {
  note.clear();
  if (session && dump.mode == "run" && can_follow(*session, dump.keys)) {
    const auto t0 = std::chrono::steady_clock::now();
    FollowedCounts n;
    StoredCandidate stored{stored_side(*dump.file, dump.group, dump.contract, StoredBy::dump), dump.keys, nullptr, nullptr};
    stored.side.label = dump.path + ":" + dump.group;
    stored.side.where = dump.path + " ";
    // Padding positions are the implementation's own business: only real rows are judged.
    const Batch& batch = session->info.batch;
    const ModelConfig& config = session->info.config;
    stored.rows = [&batch, &config](const Stage& s, const Shape& shape) {
      return real_rows(shape, batch, real_rows_rate(s, config));
    };
    CompareResult r = compare_stored_on_followed_path(*session, stored, std::move(opt), n);
    note = fmt::format("selections: the reference followed the dump's choices at {} selection stages ({} where a token "
                       "chose otherwise): {} stages evaluated on its path in {:.2f} s",
                       n.followed, n.differing, n.computed,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r;
  }
  CompareResult r = compare_candidate_dump(case_path, stages, dump, session ? session->weights.get() : nullptr, std::move(opt));
  if (dump.mode == "run")
    note = fmt::format("selections: {}; a token that chose otherwise is judged apart from then on ({}); the rows of "
                       "other tokens that attend to it are not",
                       session ? "the dump lacks a selection stage the reference could follow" : "no model to follow them with",
                       r.divergence ? fmt::format("{} tokens", r.divergence->tokens()) : "none");
  return r;
}

}  // namespace tdiff
