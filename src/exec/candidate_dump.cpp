#include "exec/candidate_dump.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "diff/real_rows.h"
#include "diff/pairing.h"

namespace tdiff {

namespace {

bool is_integer(DType t) { return t == DType::i64 || t == DType::i32 || t == DType::u8; }

// Whether a dump dtype can hold what the reference stores (selection indices must stay
// integers: a float index would compare as a value, not as a choice).
bool holds(DType ref, DType cand) {
  if (is_float(ref)) return is_float(cand);
  if (ref == DType::boolean) return cand == DType::boolean || is_integer(cand);
  return is_integer(cand);
}

std::string dataset_path(const std::string& group, const std::string& key) {
  return (group == "/" || group.empty() ? "" : group) + "/" + key;
}

void check_tensor(const std::string& case_path, const CandidateDump& d, const std::string& key) {
  const H5DatasetInfo ref = h5_dataset_info(case_path, "/reference/" + key);
  const H5DatasetInfo cand = h5_dataset_info(d.path, dataset_path(d.group, key));
  if (!holds(ref.dtype, cand.dtype))
    input_error("{}: {} is {} where the reference holds {} ({})", d.path, key, dtype_name(cand.dtype),
                dtype_name(ref.dtype), is_float(ref.dtype) ? "values" : "indices or flags");
  if (squeezed(ref.shape) != squeezed(cand.shape))
    input_error("{}: {} has shape {} where the reference has {}", d.path, key, shape_str(cand.shape), shape_str(ref.shape));
}

}  // namespace

CandidateDump open_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages, const std::string& path,
                                  const std::string& group) {
  CandidateDump d;
  d.path = path;
  d.group = group.empty() ? "/" : group;
  const auto attrs = h5_read_attrs(path, d.group);
  if (auto it = attrs.find("tdiff_dump_mode"); it != attrs.end()) d.mode = it->second;
  if (d.mode != "run" && d.mode != "isolated")
    input_error("{}: tdiff_dump_mode '{}' is not 'run' or 'isolated'", path, d.mode);
  for (const auto& [k, v] : attrs)
    if (k.rfind("env.", 0) == 0) d.env[k.substr(4)] = v;
  if (auto it = attrs.find("case"); it != attrs.end()) d.written_on = it->second;

  std::map<std::string, const Stage*> by_name;
  for (const auto& s : stages) by_name[s.name] = &s;
  d.keys = list_keys(path, d.group);
  if (d.keys.empty()) input_error("{}: no tensors under {}", path, d.group);
  std::set<std::string> covered;
  for (const auto& key : d.keys) {
    const auto [stage, tensor] = split_key(key);
    const auto it = by_name.find(stage);
    if (it == by_name.end())
      input_error("{}: {} is not an output of a stage of this model (`tdiff info {} --stages` lists them)", path, key,
                  case_path);
    const auto& outs = it->second->outputs;
    if (std::find(outs.begin(), outs.end(), tensor) == outs.end()) {
      d.extra.push_back(key);  // a capture's helper tensor (e.g. idx_sorted): listed, not compared
      continue;
    }
    if (!h5_exists(case_path, "/reference/" + key))
      input_error("{}: {} has no reference in {} (run `tdiff golden {}`)", path, key, case_path, case_path);
    check_tensor(case_path, d, key);
    covered.insert(stage);
  }
  for (const auto& s : stages)
    if (!covered.count(s.name) && h5_exists(case_path, "/reference/" + s.name)) d.lacking_stages.push_back(s.name);
  std::erase_if(d.keys, [&](const std::string& k) { return std::find(d.extra.begin(), d.extra.end(), k) != d.extra.end(); });
  if (d.keys.empty()) input_error("{}: none of its {} tensors is a stage output of this model", path, d.extra.size());
  return d;
}

CompareResult compare_candidate_dump(const std::string& case_path, const std::vector<Stage>& stages,
                                     const CandidateDump& dump, WeightStore* weights, CompareOptions opt) {
  for (const auto& s : stages) opt.stage_order.push_back(s.name);
  const CaseInfo info = read_case(case_path);
  PairingRule rule;
  rule.opt = std::move(opt);
  rule.weights = weights;
  // Padding positions are the implementation's own business: only real rows are judged.
  rule.view = [&](const Stage& s, const Tensor& t) {
    return keep_real_rows(t, real_rows(t, info.batch, info.config.rate(s.layer_type)));
  };
  TensorSide cand = h5_side(dump.path, dump.group);
  cand.label = dump.path + ":" + dump.group;
  cand.where = dump.path + " ";
  CompareResult r = pair_stages(stages, list_keys(case_path, "/reference"), dump.keys, h5_side(case_path, "/reference"),
                                cand, rule);
  // Locations split flat token rows by the case's tokens per row; a padded batch's tensors are
  // compacted to their real rows, where that split no longer holds (seq 0: rows as they are).
  bool padded = false;
  for (auto m : info.batch.mask.span<const std::uint8_t>()) padded = padded || m == 0;
  r.seq = padded ? 0 : info.batch.seq();
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
