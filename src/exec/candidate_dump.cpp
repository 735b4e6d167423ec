#include "exec/candidate_dump.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "diff/real_rows.h"
#include "diff/pairing.h"
#include "exec/saved_run.h"

namespace tdiff {

namespace fs = std::filesystem;

namespace {

bool same_inputs(const Batch& a, const Batch& b) {
  const auto equal = [](const Tensor& x, const Tensor& y) {
    return x.shape() == y.shape() && x.dtype() == y.dtype() && std::equal(x.raw(), x.raw() + x.nbytes(), y.raw());
  };
  return equal(a.ids, b.ids) && equal(a.mask, b.mask);
}

// The batch of the case file `path` names, or nullopt when no readable case is there.
std::optional<Batch> batch_at(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  try {
    return read_case(path).batch;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// Every name of the dump is a stage output of this model with a reference; its layout is the contract's.
void check_keys(CandidateDump& d, const std::string& case_path, const std::vector<Stage>& stages) {
  const auto reference_has = reference_holds(*d.case_file, d.contract);
  std::map<std::string, const Stage*> by_name;
  for (const auto& s : stages) by_name[s.name] = &s;
  std::set<std::string> covered;
  for (const auto& key : d.keys) {
    const auto [stage, tensor] = split_key(key);
    const auto it = by_name.find(stage);
    if (it == by_name.end())
      input_error("{}: {} is not an output of a stage of this model (`tdiff info {} --stages` lists them)", d.path, key,
                  case_path);
    const auto& outs = it->second->outputs;
    if (std::find(outs.begin(), outs.end(), tensor) == outs.end()) {
      d.extra.push_back(key);  // a capture's helper tensor (e.g. idx_sorted): listed, not compared
      continue;
    }
    if (!reference_has(key))
      input_error("{}: {} has no reference in {} (run `tdiff golden {}`)", d.path, key, case_path, case_path);
    check_stage_tensor(*d.file, d.group, key, *d.contract, StoredBy::dump);
    covered.insert(stage);
  }
  for (const auto& s : stages)
    if (!covered.count(s.name) && reference_has(s.name + "/" + s.outputs.front())) d.lacking_stages.push_back(s.name);
  std::erase_if(d.keys, [&](const std::string& k) { return std::find(d.extra.begin(), d.extra.end(), k) != d.extra.end(); });
  if (d.keys.empty()) input_error("{}: none of its {} tensors is a stage output of this model", d.path, d.extra.size());
}

}  // namespace

void check_named_stages(const H5File& file, const std::string& group, const std::vector<Stage>& stages,
                        const std::function<bool(const std::string& key)>& required) {
  if (!h5_exists(file, group)) return;
  std::set<std::string> held, named;
  for (const auto& key : list_keys(file.path(), group)) {
    held.insert(key);
    named.insert(split_key(key).first);
  }
  for (const auto& child : h5_list_children(file, group)) named.insert(child);  // an empty stage group names it too
  for (const auto& s : stages) {
    if (!named.count(s.name)) continue;
    std::vector<std::string> has;
    for (const auto& k : held)
      if (split_key(k).first == s.name) has.push_back(k);
    for (const auto& t : s.outputs) {
      const std::string key = s.name + "/" + t;
      if (held.count(key) || !required(key)) continue;
      input_error("{}: stage {} lacks {} ({}); a stage a dump names is compared whole, every output of it (`tdiff "
                  "info CASE --stages`)",
                  group == "/" || group.empty() ? file.path() : file.path() + ":" + group, s.name, key,
                  has.empty() ? "its group holds no tensor" : fmt::format("it holds {}", fmt::join(has, ", ")));
    }
  }
}

void check_dump_case(const CandidateDump& dump, const H5File& case_file, const Batch& batch) {
  if (!dump.inputs_sha256.empty() && dump.inputs_sha256 != inputs_sha256(batch))
    input_error("{}: written on other inputs than those of {} (token ids and mask: case_inputs_sha256 {}, the case's "
                "{}){}",
                dump.path, case_file.path(), dump.inputs_sha256.substr(0, 12), inputs_sha256(batch).substr(0, 12),
                dump.written_on.empty() ? "" : "; it names the case file " + dump.written_on);
  const std::string& on = dump.written_on;
  if (on.empty()) return;
  if (const std::optional<Batch> there = batch_at(on)) {
    if (!same_inputs(*there, batch))
      input_error("{}: written on the case file {}, whose inputs (token ids and mask) are not those of {}", dump.path,
                  on, case_file.path());
    return;
  }
  if (fs::path(on).filename() != fs::path(case_file.path()).filename())
    input_error("{}: written on the case file {}, not on {} (that file is not here to compare inputs; the names "
                "differ)",
                dump.path, on, case_file.path());
}

CandidateDump open_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages, const std::string& path,
                                  const std::string& group) {
  CandidateDump d;
  d.path = path;
  d.group = group.empty() ? "/" : group;
  d.case_file.emplace(case_path);
  d.case_info = read_case(*d.case_file);
  d.contract = std::make_shared<const TensorContract>(stages, d.case_info.config, d.case_info.batch.rows(),
                                                      d.case_info.batch.seq());
  d.file.emplace(path);
  const auto attrs = h5_read_attrs(*d.file, d.group);
  if (auto it = attrs.find("tdiff_dump_mode"); it != attrs.end()) d.mode = it->second;
  if (d.mode != "run" && d.mode != "replay" && d.mode != "isolated")
    input_error("{}: tdiff_dump_mode '{}' is not 'run', 'replay' or 'isolated'", path, d.mode);
  for (const auto& [k, v] : attrs)
    if (k.rfind("env.", 0) == 0) d.env[k.substr(4)] = v;
  if (auto it = attrs.find("case"); it != attrs.end()) d.written_on = it->second;
  if (auto it = attrs.find("case_inputs_sha256"); it != attrs.end()) d.inputs_sha256 = it->second;
  check_dump_case(d, *d.case_file, d.case_info.batch);

  d.keys = list_keys(path, d.group);
  if (d.keys.empty()) input_error("{}: no tensors under {}", path, d.group);
  check_keys(d, case_path, stages);
  check_named_stages(*d.file, d.group, stages,
                     reference_holds(*d.case_file, d.contract));
  return d;
}

CompareResult compare_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages,
                                     const CandidateDump& dump, WeightStore* weights, CompareOptions opt) {
  for (const auto& s : stages) opt.stage_order.push_back(s.name);
  const H5File case_file = dump.case_file ? *dump.case_file : H5File(case_path);
  const CaseInfo& info = dump.case_info;
  PairingRule rule;
  rule.opt = std::move(opt);
  rule.weights = weights;
  rule.opt.contract = dump.contract.get();
  rule.opt.generation_rows = info.schedule.predicting_rows(info.batch.seq());
  // Padding positions are the implementation's own business: only real rows are judged.
  rule.rows = [&](const Stage& s, const Shape& shape) { return real_rows(shape, info.batch, real_rows_rate(s, info.config)); };
  // The engine's own forward followed its own selections: a token that took another one is
  // judged apart from then on (diff/divergence.h). Replayed and isolated stages took the
  // reference's inputs, so their flips moved nothing.
  rule.opt.replayed_selections = dump.mode != "run";
  if (dump.mode == "run") rule.divergence = std::make_shared<DivergedTokens>(stages, info.config, info.batch);
  TensorSide cand = stored_side(*dump.file, dump.group, dump.contract, StoredBy::dump);
  cand.label = dump.path + ":" + dump.group;
  cand.where = dump.path + " ";
  CompareResult r = pair_stages(stages, stored_keys(case_file, "/reference", *dump.contract), dump.keys,
                                stored_side(case_file, "/reference", dump.contract, StoredBy::reference), cand, rule);
  // A padded batch's tensors are judged on their real rows; locations name the padded batch's.
  r.padding_tokens = padding_tokens(info.batch);
  r.divergence = rule.divergence;
  r.locator = std::make_shared<const Locator>(stages, info.config, info.batch, r.divergence);
  return r;
}

double local_error(const TensorDiff& d) {
  if (d.kind != TensorKind::exact && d.kind != TensorKind::routing) return d.metrics.rel_l2;
  if (d.routing) return d.routing->mismatch_share;
  return d.metrics.count ? static_cast<double>(d.metrics.n_diff) / static_cast<double>(d.metrics.count) : 0.0;
}

std::vector<const TensorDiff*> rank_by_local_error(const CompareResult& diff) {
  std::vector<const TensorDiff*> rows;
  for (const auto& d : diff.rows) rows.push_back(&d);
  std::stable_sort(rows.begin(), rows.end(), [](const TensorDiff* a, const TensorDiff* b) {
    if (a->verdict != b->verdict) return a->verdict > b->verdict;
    return local_error(*a) > local_error(*b);
  });
  return rows;
}

}  // namespace tdiff
