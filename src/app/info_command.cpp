#include "app/info_command.h"

#include "synth/synth.h"

// catalogue and the operator table.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/envelope.h"
#include "casefile/case_file.h"
#include "casefile/reference_layers.h"
#include "base/error.h"
#include "model/pattern.h"
#include "numerics/policy.h"
#include "model/stage_graph.h"
#include "model/tensor_contract.h"
#include "formats/weights.h"
#include "history/history_db.h"
#include "history/legacy_import.h"
#include "exec/backend_registry.h"

namespace tdiff::app {

namespace {

constexpr std::size_t kWidth = 100;  // the stage table fits a 100-column terminal


// Prints `label` in a 10-column margin, then the text.
void line(const std::string& label, const std::string& text) { fmt::print("{:<10}{}\n", label, text); }

std::string mlp_name(MlpType t) { return t == MlpType::hash_moe ? "hash_moe" : "moe"; }

std::string human_bytes(std::uintmax_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

void print_model(const ModelConfig& c) {
  line("dims", fmt::format("vocab {}, hidden {}, {} layers, {} heads x {} (rope {}), q_lora {}, o {} groups x {}",
                           c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.head_dim,
                           c.rope_dim, c.q_lora_rank, c.o_groups, c.o_lora_rank));
  line("", fmt::format("window {}, csa rate {}, hca rate {}, indexer {} heads x {} top {}, hc {} streams",
                       c.sliding_window, c.csa_rate, c.hca_rate, c.index_n_heads, c.index_head_dim, c.index_topk,
                       c.hc_mult));
  line("", fmt::format("{} experts, top {}, intermediate {}", c.n_routed_experts, c.num_experts_per_tok,
                       c.moe_intermediate_size));
  // Runs of consecutive layers with the same attention and MLP type, one line each.
  std::string label = "layers";
  for (std::int64_t l = 0; l < c.num_hidden_layers;) {
    const auto at = c.layer_types[static_cast<std::size_t>(l)];
    const auto mt = c.mlp_types[static_cast<std::size_t>(l)];
    std::int64_t e = l;
    while (e + 1 < c.num_hidden_layers && c.layer_types[static_cast<std::size_t>(e + 1)] == at &&
           c.mlp_types[static_cast<std::size_t>(e + 1)] == mt)
      ++e;
    const std::string range = e == l ? fmt::format("L{:02}", l) : fmt::format("L{:02}-L{:02}", l, e);
    line(label, fmt::format("{:<9} {:<29} {}", range, layer_type_name(at), mlp_name(mt)));
    label.clear();
    l = e + 1;
  }
}

std::string fit(const std::string& s, std::size_t w) {
  if (s.size() <= w) return s;
  return w <= 3 ? s.substr(0, w) : s.substr(0, w - 3) + "...";
}

// The stages matching `pattern`, in model order (InputError when none does).
std::vector<std::size_t> matching_stages(const std::vector<Stage>& all, const std::string& pattern) {
  std::vector<std::size_t> shown;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (pattern_matches(pattern, all[i].name)) shown.push_back(i);
  if (shown.empty()) input_error("--stages '{}': no stage matches (e.g. 'L00.attn.*')", pattern);
  return shown;
}

// "q[2,40,4,32]" for a case; "q[B,S,H,d]" for a model folder (no batch: the axes' names).
std::string outputs_with_shapes(const Stage& s, const TensorContract& contract, bool sizes) {
  std::vector<std::string> out;
  for (const auto& t : s.outputs) {
    const TensorSpec* spec = contract.find(s.name + "/" + t);
    out.push_back(t + (sizes ? shape_str(spec->shape()) : spec->axes_str()));
  }
  return fmt::format("{}", fmt::join(out, " "));
}

// `contract`: the case's (shapes in numbers), or one of a model without a batch (axis names).
void print_stages(const ModelConfig& c, const std::string& pattern, const TensorContract& contract, bool sizes) {
  const auto all = build_stages(c);
  const std::vector<std::size_t> shown = matching_stages(all, pattern);
  struct Row { std::string idx, name, kind, in, out, w; };
  std::vector<Row> rows{{"#", "stage", "kind", "inputs", "outputs", "w"}};
  for (auto i : shown) {
    const Stage& s = all[i];
    std::vector<std::string> in;
    for (const auto& r : s.inputs) in.push_back(r.key());
    rows.push_back({std::to_string(i), s.name, op_kind_name(s.kind), fmt::format("{}", fmt::join(in, " ")),
                    outputs_with_shapes(s, contract, sizes), std::to_string(s.weights.size())});
  }
  std::size_t wi = 0, wn = 0, wk = 0, wo = 0, ww = 0;
  for (const auto& r : rows) {
    wi = std::max(wi, r.idx.size());
    wn = std::max(wn, r.name.size());
    wk = std::max(wk, r.kind.size());
    wo = std::max(wo, r.out.size());
    ww = std::max(ww, r.w.size());
  }
  // Outputs with their shapes first; inputs take what is left of the line (at least 8), long
  // lists of either cut with "...".
  constexpr std::size_t kMinInputs = 8;
  const std::size_t fixed = wi + wn + wk + ww + 5 * 2;
  wo = std::min(wo, fixed + kMinInputs < kWidth ? kWidth - kMinInputs - fixed : std::size_t{16});
  const std::size_t used = fixed + wo;
  const std::size_t win = used < kWidth ? std::max<std::size_t>(kWidth - used, kMinInputs) : kMinInputs;
  for (const auto& r : rows) {
    std::string s = fmt::format("{:>{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}", r.idx, wi, r.name, wn, r.kind, wk,
                                fit(r.in, win), win, fit(r.out, wo), wo, r.w, ww);
    s.erase(s.find_last_not_of(' ') + 1);
    fmt::print("{}\n", s);
  }
  fmt::print("{} of {} stages\n", shown.size(), all.size());
}

// The contract as JSON: one object per tensor of the matching stages, as a dump may hold it.
void print_contract_json(const ModelConfig& c, const std::string& pattern, const TensorContract& contract) {
  const auto all = build_stages(c);
  nlohmann::json out = nlohmann::json::array();
  for (auto i : matching_stages(all, pattern))
    for (const auto& t : all[i].outputs) {
      const TensorSpec& spec = *contract.find(all[i].name + "/" + t);
      nlohmann::json axes = nlohmann::json::array();
      for (const auto& a : spec.axes) axes.push_back(a.name);
      nlohmann::json j = {{"key", spec.key()},
                          {"stage", spec.stage},
                          {"tensor", spec.tensor},
                          {"kind", op_kind_name(spec.kind)},
                          {"class", value_class_name(spec.value)},
                          {"dtype", spec.value == ValueClass::floating ? "f64" : spec.value == ValueClass::index ? "i64" : "bool"},
                          {"shape", spec.shape()},
                          {"axes", axes}};
      if (spec.range) j["range"] = {spec.range->lo, spec.range->hi};
      out.push_back(std::move(j));
    }
  // One tensor a line: `| grep`, `| head` and diffs read it as they read the stage table.
  fmt::print("[\n");
  for (std::size_t i = 0; i < out.size(); ++i) fmt::print(" {}{}\n", out[i].dump(), i + 1 < out.size() ? "," : "");
  fmt::print("]\n");
}

// One column of `--ops`: what a backend of the registry says for each kind.
struct CoverageColumn {
  std::string name;
  std::function<std::string(OpKind)> cell;
};

CoverageColumn backend_column(const BackendEntry& e) {
  if (!e.built) return {e.name, [](OpKind) { return std::string("not built"); }};
  std::shared_ptr<Backend> b;
  try {
    b = make_backend(e.name, Policy::preset("fixed"));
  } catch (const InputError&) {  // built, but no device to make it on
    return {e.name, [](OpKind) { return std::string("no device"); }};
  }
  return {e.name, [b](OpKind k) { return std::string(b->implements(k) ? "yes" : "missing"); }};
}

// The operator table with each kind's coverage: the backends that implement it (the
// reference first) and the tests/gpu file that checks its kernels.
}  // namespace

void info_model(const InfoOptions& o) {
  CaseInfo m = case_for_model(o.model);
  const WeightStore weights(m.model_path, m.config);  // the same checks `case new` makes
  if (!o.stages.empty()) select_stages(o.stages, build_stages(m.config));  // before the first line is printed
  line("model", m.model_path);
  print_model(m.config);
  std::int64_t params = 0;
  for (const auto& [name, spec] : expected_weights(m.config)) params += shape_numel(spec.shape);
  std::set<std::string> dtypes;
  // The release layout's storage formats by their safetensors names (F8_E4M3, F8_E8M0, I8, ...).
  for (const auto& name : weights.files().names()) {
    const TensorInfo& info = weights.files().info(name);
    dtypes.insert(weights.release_layout() ? info.format : std::string(dtype_name(info.dtype)));
  }
  if (weights.release_layout()) line("layout", "DeepSeek release (release names; FP8 linears, FP4 routed experts)");
  std::string label = "weights";
  for (const auto& file : weights.files().files()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    line(label, fmt::format("{} ({})", std::filesystem::path(file).filename().string(), human_bytes(size)));
    label.clear();
  }
  line("", fmt::format("{} tensors, {} parameters, dtypes {}", weights.files().names().size(), params,
                       fmt::join(dtypes, " ")));
  if (!o.stages.empty()) {
    fmt::print("\n");
    print_stages(m.config, o.stages, TensorContract(build_stages(m.config), m.config, 1, 1), false);
  }
}

namespace {

// The newest `limit` items of `ids` (all when 0) by `date` (ids break ties), oldest first, and
// how many older ones are left out.
template <typename DateOf>
std::pair<std::vector<std::string>, std::size_t> newest(std::vector<std::string> ids, std::size_t limit, DateOf date) {
  std::stable_sort(ids.begin(), ids.end(), [&](const std::string& a, const std::string& b) {
    return std::make_pair(date(a), a) < std::make_pair(date(b), b);
  });
  const std::size_t left_out = limit == 0 || ids.size() <= limit ? 0 : ids.size() - limit;
  ids.erase(ids.begin(), ids.begin() + static_cast<long>(left_out));
  return {ids, left_out};
}

void print_env_records(const std::map<std::string, EnvRecord>& env, std::size_t limit, const std::string& path) {
  if (env.empty()) line("env", "none");
  std::vector<std::string> ids;
  for (const auto& [id, e] : env) ids.push_back(id);
  const auto [shown, older] = newest(ids, limit, [&](const std::string& id) { return env.at(id).date_utc; });
  if (older > 0) line("env", fmt::format("{} older records not shown (tdiff info {} --runs all)", older, path));
  std::string label = older > 0 ? "" : "env";
  for (const auto& id : shown) {
    const EnvRecord& e = env.at(id);
    line(label, fmt::format("{}  {}  backend {}  policy {}", shown_run_id(id), e.date_utc, e.backend,
                            e.policy.empty() ? "-" : e.policy));
    line("", fmt::format("  tdiff {} {}, {} threads, {} ({}, {} cores)", e.tdiff_version, e.git_commit, e.omp_threads,
                         e.hostname, e.cpu_model, e.cpu_cores));
    if (!e.os.empty()) line("", fmt::format("  {}, {}", e.os, e.kernel));
    for (const auto& [k, v] : e.extra) {  // a multi-line value (policy_stages) indented under its key
      std::string text = v;
      for (auto at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
        text.insert(at + 1, std::string(k.size() + 13, ' '));
      line("", fmt::format("  {} {}", k, text));
    }
    label.clear();
  }
}

// Saved runs (/runs/<id>): run ids begin with their time, so the newest sort last.
void print_saved_runs(const std::vector<std::string>& runs, std::size_t limit, const std::string& path) {
  if (runs.empty()) line("runs", "none");
  const auto [shown, older] = newest(runs, limit, [](const std::string& id) {  // "<kind>-<time>-<random>"
    const auto dash = id.find('-');
    return dash == std::string::npos ? id : id.substr(dash + 1);
  });
  if (older > 0) line("runs", fmt::format("{} older saved runs not shown (tdiff info {} --runs all)", older, path));
  std::string label = older > 0 ? "" : "runs";
  for (const auto& id : shown) {
    line(label, fmt::format("{}  {} tensors", shown_run_id(id), h5_list_datasets(path, "/runs/" + id).size()));
    label.clear();
  }
}


// The newest runs of the case in its run history (history/history_db.h); the case's old in-file
// records are read into it first where it can be written, else shown from the case.
void print_history(const std::string& path, const std::string& given, std::size_t limit) {
  const std::string abs = std::filesystem::absolute(path).lexically_normal().string();
  const std::string db_path = history::history_path_for(abs, given);
  std::vector<history::RunEntry> runs;
  std::size_t total = 0;
  std::string where = db_path;
  try {
    if (!std::filesystem::exists(db_path)) input_error("read into {} by the next recorded run", db_path);
    history::HistoryDb db(db_path, false);
    db.import_case(abs);
    runs = db.runs({abs, "", "", limit, false});
    total = db.count(abs);
  } catch (const InputError& e) {  // no history yet, or one that cannot take the import: the case's own records
    runs = history::read_case_records(abs);
    total = runs.size();
    if (limit > 0 && runs.size() > limit) runs.erase(runs.begin(), runs.end() - static_cast<long>(limit));
    where = fmt::format("the case file's own records ({})", e.what());
    if (runs.empty()) return line("history", fmt::format("none yet (runs are recorded in {})", db_path));
  }
  if (runs.empty()) return line("history", fmt::format("no runs ({})", where));
  line("history", fmt::format("{} run{} in {}{}", total, total == 1 ? "" : "s", where,
                              total > runs.size() ? fmt::format("; the newest {} (tdiff history {})", runs.size(), path)
                                                  : ""));
  for (const auto& e : runs)
    line("", fmt::format("{}  {}  {:<11} {:<5} {}{}", shown_run_id(e.id), e.date_utc, e.kind,
                         e.verdict.empty() ? "-" : e.verdict, e.label,
                         e.first_divergence.empty() ? "" : "  first: " + e.first_divergence));
}
}  // namespace

void info_case(const InfoOptions& o) {
  const std::string& path = o.case_path;
  const CaseInfo c = read_case(path);
  const auto env = read_env_records(path);
  const auto runs = case_runs(path);
  if (!o.stages.empty()) select_stages(o.stages, build_stages(c.config));
  const TensorContract contract(build_stages(c.config), c.config, c.batch.rows(), c.batch.seq());
  if (o.json) return print_contract_json(c.config, o.stages.empty() ? "*" : o.stages, contract);
  line("case", fmt::format("{} (format {}, written by tdiff {} {})", path, c.format_version, c.tdiff_version,
                           c.tdiff_commit));
  line("model", c.model_path);
  for (const auto& [file, sum] : c.checksums) line("", fmt::format("sha256 {} {}", sum.substr(0, 16), file));
  print_model(c.config);

  const Batch& b = c.batch;
  line("inputs", fmt::format("{} prompts x {} tokens, padding {}{}, seed {}", b.rows(), b.seq(), c.pad_side,
                             c.pad_to > 0 ? fmt::format(" (pad-to {})", c.pad_to) : "", c.seed));
  std::vector<std::string> spans;
  for (std::int64_t r = 0; r < b.rows(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    spans.push_back(fmt::format("{} [{},{})", b.length[i], b.start[i], b.start[i] + b.length[i]));
  }
  const std::size_t keep = std::min<std::size_t>(spans.size(), 8);
  line("", fmt::format("real tokens per row: {}{}", fmt::join(spans.begin(), spans.begin() + static_cast<long>(keep), ", "),
                       spans.size() > keep ? fmt::format(", ... ({} more)", spans.size() - keep) : ""));
  if (c.schedule.generation())
    line("schedule", fmt::format("generation: {} (teacher-forced; positions {}..{} predict the decoded tokens)",
                                 c.schedule.describe(b.seq()), c.schedule.prompt - 1, b.seq() - 1));

  const auto stages = reference_stages(path);
  if (stages.empty()) {
    line("reference", fmt::format("none (run: tdiff golden {})", path));
  } else {
    const auto expected = build_stages(c.config).size();
    const auto attrs = h5_read_attrs(path, "/reference");
    std::string from;
    for (const auto& [k, v] : attrs) from += fmt::format("{}{} {}", from.empty() ? ", " : " ", k, v);
    const auto store = attrs.find("store");
    const bool boundaries = store != attrs.end() && store->second == kStoreBoundaries;
    line("reference", fmt::format("{} of {} stages{}, {} tensors{}", stages.size(), expected,
                                  boundaries ? " stored (the layers' other stages recomputed from them when read)" : "",
                                  h5_list_datasets(path, "/reference").size(), from));
  }
  // The case's own records (its reference's); an older tdiff's run records are the history's now.
  std::map<std::string, EnvRecord> own_env;
  for (const auto& [id, e] : env)
    if (std::find(runs.begin(), runs.end(), id) == runs.end()) own_env[id] = e;
  print_env_records(own_env, o.runs, path);
  std::vector<std::string> saved;  // runs whose tensors were kept in the case (run --save)
  for (const auto& id : runs)
    if (!h5_list_datasets(path, "/runs/" + id).empty()) saved.push_back(id);
  print_saved_runs(saved, o.runs, path);
  print_history(path, o.history, o.runs);
  // Ids that are not plain names (another tool's, an earlier tdiff's) are listed escaped, and
  // said so once each: never refused, a case holding one would stay unreadable for good.
  std::set<std::string> odd;
  for (const auto& [id, e] : env)
    if (!is_safe_run_id(id)) odd.insert(id);
  for (const auto& id : runs)
    if (!is_safe_run_id(id)) odd.insert(id);
  for (const auto& id : odd) fmt::print("note: run id {} is not a plain name; shown escaped\n", shown_run_id(id));
  if (!o.stages.empty()) {
    fmt::print("\n");
    print_stages(c.config, o.stages, contract, true);
  }
}

// The fault catalog as a Markdown table (docs/reference/fault-catalog.md's copy is checked against this output).
void print_knobs() {
  fmt::print("| knob | values | bad | fixed | in naive | operator kinds | what the bad setting does |\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  for (const KnobInfo& k : knob_catalog()) {
    std::vector<std::string> kinds;
    for (OpKind kind : k.kinds) kinds.push_back(op_kind_name(kind));
    const std::string all = kinds.size() > 20 ? "every compute kind" : fmt::format("{}", fmt::join(kinds, ", "));
    const std::string paper = k.paper_factor > 0 ? fmt::format(" (paper: ~{}x error)", k.paper_factor) : "";
    fmt::print("| `{}` | {} | {} | {} | {} | {} | {}{} |\n", k.name, fmt::join(k.values, ", "), k.bad, k.good,
               k.in_naive ? "yes" : "no", all, k.effect, paper);
  }
}

void print_dump_format() {
  // The tiny preset's stage graph has a layer of every attention type; rows are the model's
  // stage outputs with the layer number folded (Lxx), in model order.
  const ModelConfig config = synth_preset("tiny");
  const std::vector<Stage> stages = build_stages(config);
  const TensorContract contract(stages, config, 1, 1);
  struct Row {
    std::string key, axes, dtype, kind;
    std::vector<std::string> layers;
  };
  std::vector<Row> rows;
  for (const auto& s : stages)
    for (const auto& t : s.outputs) {
      const TensorSpec& spec = *contract.find(s.name + "/" + t);
      const std::string key = (s.layer >= 0 ? "Lxx" + s.name.substr(3) : s.name) + "/" + t;
      const char* dtype = spec.value == ValueClass::floating ? "float"
                          : spec.value == ValueClass::index  ? "integer ids"
                                                             : "flags (bool or integers)";
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.key == key; });
      if (it == rows.end()) it = rows.insert(rows.end(), {key, spec.axes_str(), dtype, op_kind_name(spec.kind), {}});
      const std::string layer = s.layer < 0                                 ? ""
                                : s.layer_type == LayerType::csa            ? "CSA"
                                : s.layer_type == LayerType::hca            ? "HCA"
                                                                            : "sliding";
      if (!layer.empty() && std::find(it->layers.begin(), it->layers.end(), layer) == it->layers.end())
        it->layers.push_back(layer);
    }
  fmt::print("| tensor | axes | values | operator kind | layers |\n|---|---|---|---|---|\n");
  for (const Row& r : rows)
    fmt::print("| `{}` | `{}` | {} | {} | {} |\n", r.key, r.axes, r.dtype, r.kind,
               r.layers.empty() ? "-" : r.layers.size() == 3 ? "every" : fmt::format("{}", fmt::join(r.layers, ", ")));
}

void print_ops() {
  std::vector<CoverageColumn> cols;
  for (bool reference : {true, false})
    for (const BackendEntry& e : backend_registry())
      if (e.candidate != reference) cols.push_back(backend_column(e));
  std::string head = fmt::format("{:<15} {:<17} {:<8} {:<9}", "kind", "family", "outputs", "selection");
  for (const auto& c : cols) head += fmt::format(" {:<10}", c.name);
  fmt::print("{} GPU test\n", head);
  std::vector<std::string> untested;
  for (const OpInfo& op : op_table()) {
    std::string row = fmt::format("{:<15} {:<17} {:<8} {:<9}", op.name, op_family_name(op.family),
                                  tensor_kind_name(op.output), op.selection ? "yes" : "no");
    for (const auto& c : cols) row += fmt::format(" {:<10}", c.cell(op.kind));
    if (!*op.gpu_test) untested.push_back(op.name);
    fmt::print("{} {}\n", row, *op.gpu_test ? fmt::format("tests/gpu/{}", op.gpu_test) : "missing");
  }
  fmt::print("{} kinds; a GPU test for {}{}\n", op_table().size(), op_table().size() - untested.size(),
             untested.empty() ? "" : fmt::format(" (missing: {})", fmt::join(untested, ", ")));
}

}  // namespace tdiff::app
