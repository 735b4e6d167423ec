#include "casefile/case_file.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/parallel_errors.h"
#include "formats/safetensors.h"
#include "model/stage_graph.h"
#include "base/version.h"
#include "formats/weight_files.h"
#include "formats/weights.h"
#include "base/sha256.h"
#include "casefile/reference_store.h"

namespace tdiff {

namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksumPrefix = "sha256:";
constexpr const char* kStatPrefix = "stat:";

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string attr(const std::map<std::string, std::string>& a, const std::string& file, const std::string& name,
                 const std::string& where = "/") {
  auto it = a.find(name);
  if (it == a.end()) input_error("{}: attribute '{}' of '{}' is missing", file, name, where);
  return it->second;
}

std::int64_t parse_int(const std::string& text, const std::string& file, const std::string& name) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size())
    input_error("{}: attribute '{}' = '{}' is not an integer", file, name, text);
  return v;
}

// Splits a newline-joined attribute back into lines.
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string prompt_line(const std::vector<std::int64_t>& ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

// Uniform in [0, n) from a 64-bit engine; std::uniform_int_distribution is not specified
// bit for bit, so it would make random prompts differ between standard libraries.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= reject_below) return r % n;
  }
}

void write_case(H5Writer& w, const CaseInfo& info) {
  w.set_attr("/", "format_version", kCaseFormatVersion);
  w.set_attr("/", "tdiff_version", TDIFF_VERSION);
  w.set_attr("/", "tdiff_commit", TDIFF_GIT_COMMIT);
  w.set_attr("/", "model_config", info.config_text);
  w.set_attr("/", "model_path", info.model_path);
  w.set_attr("/", "seed", std::to_string(info.seed));
  for (const auto& [file, sum] : info.checksums) w.set_attr("/", kChecksumPrefix + file, sum);
  for (const auto& [file, st] : info.file_stats) w.set_attr("/", kStatPrefix + file, st);
  w.write("/inputs/ids", info.batch.ids);
  w.write("/inputs/mask", info.batch.mask.to(DType::boolean));
  w.write("/inputs/pos", info.batch.pos);
  w.set_attr("/inputs", "pad_to", std::to_string(info.pad_to));
  w.set_attr("/inputs", "pad_side", info.pad_side);
  w.set_attr("/inputs", "prompts", fmt::format("{}", fmt::join(info.prompts, "\n")));
  if (info.schedule.generation()) {
    w.set_attr("/inputs", "schedule_prompt", std::to_string(info.schedule.prompt));
    w.set_attr("/inputs", "schedule_chunks", fmt::format("{}", fmt::join(info.schedule.chunks, ",")));
  }
}

}  // namespace

CaseInfo read_case(const std::string& path) { return read_case(H5File(path)); }

CaseInfo read_case(const H5File& file) {
  const std::string& path = file.path();
  const auto root = h5_read_attrs(file, "/");
  if (!root.count("format_version")) input_error("{}: not a tdiff case file (no format_version attribute)", path);
  CaseInfo c;
  c.format_version = root.at("format_version");
  if (c.format_version != kCaseFormatVersion)
    input_error("{}: case format version '{}' is not supported (this tdiff reads version {})", path, c.format_version,
                kCaseFormatVersion);
  c.tdiff_version = root.count("tdiff_version") ? root.at("tdiff_version") : "";
  c.tdiff_commit = root.count("tdiff_commit") ? root.at("tdiff_commit") : "";
  c.config_text = attr(root, path, "model_config");
  c.config = parse_config_text(c.config_text, path + " (attribute model_config)");
  c.model_path = attr(root, path, "model_path");
  const std::string seed = attr(root, path, "seed");
  c.seed = static_cast<std::uint64_t>(parse_int(seed, path, "seed"));
  for (const auto& [name, value] : root) {
    if (name.rfind(kChecksumPrefix, 0) == 0) c.checksums[name.substr(std::string(kChecksumPrefix).size())] = value;
    if (name.rfind(kStatPrefix, 0) == 0) c.file_stats[name.substr(std::string(kStatPrefix).size())] = value;
  }

  Tensor ids = h5_read(file, "/inputs/ids");
  Tensor mask = h5_read(file, "/inputs/mask");
  if (is_float(ids.dtype())) input_error("{}: dataset '/inputs/ids' holds {}, not integers", path, dtype_name(ids.dtype()));
  if (is_float(mask.dtype())) input_error("{}: dataset '/inputs/mask' holds {}, not 0/1", path, dtype_name(mask.dtype()));
  c.batch = Batch::make(std::move(ids), std::move(mask), c.config.vocab_size, path);
  if (h5_exists(file, "/inputs/pos")) {
    const Tensor pos = h5_read(file, "/inputs/pos");
    const bool same = pos.shape() == c.batch.pos.shape() && !is_float(pos.dtype()) &&
                      std::ranges::equal(pos.to(DType::i64).span<const std::int64_t>(), c.batch.pos.span<const std::int64_t>());
    if (!same)
      input_error("{}: dataset '/inputs/pos' disagrees with the positions the mask implies", path);
  }
  const auto in = h5_read_attrs(file, "/inputs");
  c.pad_to = parse_int(attr(in, path, "pad_to", "/inputs"), path, "pad_to");
  c.pad_side = attr(in, path, "pad_side", "/inputs");
  if (c.pad_side != "right" && c.pad_side != "left")
    input_error("{}: attribute 'pad_side' of '/inputs' is '{}' (right or left)", path, c.pad_side);
  c.prompts = split_lines(in.count("prompts") ? in.at("prompts") : "");
  if (in.count("schedule_prompt") || in.count("schedule_chunks")) {
    const std::string where = path + " (attributes schedule_prompt and schedule_chunks of /inputs)";
    const auto prompt = parse_int(attr(in, path, "schedule_prompt", "/inputs"), path, "schedule_prompt");
    c.schedule = Schedule::make(c.batch, c.batch.seq() - prompt,
                                parse_chunk_list(attr(in, path, "schedule_chunks", "/inputs"), where), where);
  }
  return c;
}

namespace {

// "tdiff golden c.h5": how a waiter for the case's lock is told who holds it.
std::string lock_holder_text() {
  auto args = process_command_line();
  if (!args.empty()) args.erase(args.begin());
  std::string text = fmt::format("tdiff {}", fmt::join(args, " "));
  return text.size() > 160 ? text.substr(0, 157) + "..." : text;
}

}  // namespace

void create_case(const std::string& path, const CaseInfo& info) {
  std::optional<FileLock> lock;  // replacing a case: not while another command updates it
  if (fs::exists(path)) lock.emplace(path, lock_holder_text());
  H5Writer w(path);
  write_case(w, info);
  w.commit();
}

CaseInfo case_for_model(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::exists(model_dir, ec)) input_error("{}: model folder does not exist", model_dir);
  if (!fs::is_directory(model_dir, ec)) input_error("{}: not a folder (expected a model folder with config.json)", model_dir);
  CaseInfo c;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  c.config_text = read_text_file(config_path);
  c.config = parse_config_text(c.config_text, config_path);
  c.model_path = fs::weakly_canonical(fs::absolute(model_dir)).string();
  return c;
}

ChecksumReport add_weight_checksums(CaseInfo& c, const ChecksumOptions& o) {
  WeightStore weights(c.model_path, c.config);
  const ChecksumReport report = record_weight_files(c, weights.files().files(), o);
  // golden would refuse a NaN or Inf weight only when it reaches that stage: say so now.
  weights.check_all_finite();
  return report;
}

ChecksumReport record_weight_files(CaseInfo& c, const std::vector<std::string>& files, const ChecksumOptions& o) {
  // The records first (about 1 MiB read per file): a change after them moves the time.
  std::vector<std::string> stats(files.size());
  ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < files.size(); ++i) errors.run(i, [&] { stats[i] = weight_file_stat(files[i]); });
  errors.rethrow();
  ChecksumReport report;
  const std::vector<std::string> sums = weight_checksums(files, o, &report);
  c.checksums.clear();
  c.file_stats.clear();
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string name = fs::path(files[i]).filename().string();
    c.file_stats[name] = stats[i];
    c.checksums[name] = sums[i];
  }
  return report;
}

PromptSet read_token_file(const std::string& path, std::int64_t vocab_size) {
  std::error_code ec;
  if (!fs::exists(path, ec)) input_error("{}: token file does not exist", path);
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path, ec)) input_error("{}: cannot read the token file", path);
  PromptSet p;
  p.source = path;
  std::string line;
  for (std::int64_t no = 1; std::getline(in, line); ++no) {
    const std::string text = trim(line);
    if (text.empty()) continue;
    std::vector<std::int64_t> ids;
    for (std::size_t b = line.find_first_not_of(" \t\r"); b != std::string::npos; b = line.find_first_not_of(" \t\r", b)) {
      const std::size_t e = std::min(line.find_first_of(" \t\r", b), line.size());
      const std::string w = line.substr(b, e - b);
      std::int64_t v = 0;
      auto [end, err] = std::from_chars(w.data(), w.data() + w.size(), v);
      // The column, not the word: a token file may be anything (suite.toml names it), and an
      // error message must not show a file's contents.
      if (err != std::errc() || end != w.data() + w.size())
        input_error("{}:{}:{}: not a token id (expected integers separated by spaces)", path, no, b + 1);
      if (v < 0 || v >= vocab_size)
        input_error("{}:{}: token id {} is outside the vocabulary 0..{}", path, no, v, vocab_size - 1);
      ids.push_back(v);
      b = e;
    }
    p.ids.push_back(std::move(ids));
    p.lines.push_back(text);
    p.line_no.push_back(no);
  }
  if (p.ids.empty()) input_error("{}: no prompts (the token file holds only blank lines)", path);
  return p;
}

PromptSet random_prompts(std::int64_t n, std::int64_t len, std::int64_t vocab_size, std::uint64_t seed) {
  if (n <= 0) input_error("--random-prompts {}: the number of prompts must be > 0", n);
  if (len <= 0) input_error("--len {}: the prompt length must be > 0", len);
  if (vocab_size <= 0) input_error("vocabulary size {} must be > 0", vocab_size);
  PromptSet p;
  p.source = "--random-prompts";
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(len));
    for (auto& id : ids) id = static_cast<std::int64_t>(uniform_below(rng, static_cast<std::uint64_t>(vocab_size)));
    p.lines.push_back(prompt_line(ids));
    p.ids.push_back(std::move(ids));
    p.line_no.push_back(0);
  }
  return p;
}

Batch pad_prompts(const PromptSet& prompts, std::int64_t pad_to, bool pad_left, std::int64_t vocab_size) {
  if (prompts.ids.empty()) input_error("{}: no prompts", prompts.source);
  if (pad_to < 0) input_error("--pad-to {} must be >= 0", pad_to);
  std::int64_t longest = 0;
  for (std::size_t r = 0; r < prompts.ids.size(); ++r) {
    const auto len = static_cast<std::int64_t>(prompts.ids[r].size());
    if (pad_to > 0 && len > pad_to) {
      const std::string where = prompts.line_no[r] > 0 ? fmt::format("{}:{}", prompts.source, prompts.line_no[r])
                                                       : fmt::format("{} (prompt {})", prompts.source, r);
      input_error("{}: the prompt has {} tokens, more than --pad-to {}", where, len, pad_to);
    }
    longest = std::max(longest, len);
  }
  const std::int64_t B = static_cast<std::int64_t>(prompts.ids.size()), S = std::max(pad_to, longest);
  Tensor ids(DType::i64, {B, S}), mask(DType::u8, {B, S});  // zero-filled: pad id 0, mask 0
  auto* id = ids.data<std::int64_t>();
  auto* m = mask.data<std::uint8_t>();
  for (std::int64_t r = 0; r < B; ++r) {
    const auto& p = prompts.ids[static_cast<std::size_t>(r)];
    const std::int64_t len = static_cast<std::int64_t>(p.size()), first = pad_left ? S - len : 0;
    for (std::int64_t i = 0; i < len; ++i) {
      id[r * S + first + i] = p[static_cast<std::size_t>(i)];
      m[r * S + first + i] = 1;
    }
  }
  return Batch::make(std::move(ids), std::move(mask), vocab_size, prompts.source);
}

std::vector<std::string> reference_stages(const std::string& path) { return reference_stages(H5File(path)); }

std::vector<std::string> reference_stages(const H5File& file) {
  const std::string& path = file.path();
  if (!h5_exists(file, "/reference")) return {};
  std::vector<std::string> names = h5_list_children(file, "/reference");
  std::map<std::string, std::size_t> order;
  const auto root = h5_read_attrs(file, "/");
  if (auto it = root.find("model_config"); it != root.end()) {
    const auto stages = build_stages(parse_config_text(it->second, path + " (attribute model_config)"));
    for (std::size_t i = 0; i < stages.size(); ++i) order[stages[i].name] = i;
  }
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    const auto ia = order.count(a) ? order[a] : order.size(), ib = order.count(b) ? order[b] : order.size();
    return ia != ib ? ia < ib : a < b;
  });
  return names;
}

std::vector<std::string> reference_tensors(const std::string& path, const std::string& stage) {
  return reference_tensors(H5File(path), stage);
}

std::vector<std::string> reference_tensors(const H5File& file, const std::string& stage) {
  return h5_list_children(file, "/reference/" + stage);
}

// A one-off store: the same checks as every reader of the reference (casefile/stored_tensor.h).
Tensor read_reference(const std::string& path, const std::string& stage, const std::string& tensor) {
  return ReferenceStore(path, 0).get(stage, tensor);
}

std::map<std::string, EnvRecord> read_env_records(const std::string& path) {
  std::map<std::string, EnvRecord> out;
  if (!h5_exists(path, "/env")) return out;
  for (const auto& id : h5_list_children(path, "/env")) out[id] = EnvRecord::from_attrs(h5_read_attrs(path, "/env/" + id));
  return out;
}

std::vector<std::string> case_runs(const std::string& path) {
  if (!h5_exists(path, "/runs")) return {};
  return h5_list_children(path, "/runs");
}

std::string reference_id(const std::string& path) { return reference_id(H5File(path)); }

std::string reference_id(const H5File& file) {
  if (!h5_exists(file, "/reference")) return "";
  const auto attrs = h5_read_attrs(file, "/reference");
  const auto it = attrs.find("env");
  return it == attrs.end() ? "" : it->second;
}


CaseUpdate::CaseUpdate(const std::string& path, H5Writer::Copy copy)
    : lock_(path, lock_holder_text()),
      info_(read_case(path)),
      reference_id_(tdiff::reference_id(path)),
      writer_path_(path),
      writer_(path, path, copy) {}

void CaseUpdate::require_reference(const std::string& id_read) const {
  if (reference_id_ == id_read) return;
  input_error("{}: its reference was recomputed by another command meanwhile (golden {} replaced {}): the result above "
              "is against the old reference and is not recorded in the case (run the command again to record it)",
              writer_path_, reference_id_.empty() ? "-" : reference_id_, id_read.empty() ? "-" : id_read);
}

void CaseUpdate::check(const std::string& path) {
  read_case(path);
  H5Writer::check_update(path);
}

void CaseUpdate::clear_reference() {
  writer_.remove("/reference");
  writer_.remove("/conditioning");  // of that reference: the two are written together
}

void CaseUpdate::put_reference(const std::string& stage, const std::string& tensor, const Tensor& t) {
  writer_.write("/reference/" + stage + "/" + tensor, t);
}

void CaseUpdate::put_conditioning(const std::string& stage, const std::string& tensor, const StoredConditioning& c) {
  const std::string path = "/conditioning/" + stage + "/" + tensor;
  writer_.write(path, c.row_gain);
  writer_.set_attr(path, "gain_l2", fmt::format("{:.17g}", c.gain_l2));
}

void CaseUpdate::put_env(const std::string& run_id, const EnvRecord& env) {
  const std::string group = "/env/" + run_id;
  writer_.remove(group);  // a record is replaced whole, never merged
  for (const auto& [k, v] : env.to_attrs()) writer_.set_attr(group, k, v);
}

void CaseUpdate::put_file_stats(const std::map<std::string, std::string>& stats) {
  for (const auto& [file, record] : stats) writer_.set_attr("/", kStatPrefix + file, record);
}

void CaseUpdate::put_weight_records(const CaseInfo& c) {
  for (const auto& [file, sum] : info_.checksums) writer_.remove_attr("/", kChecksumPrefix + file);
  for (const auto& [file, st] : info_.file_stats) writer_.remove_attr("/", kStatPrefix + file);
  for (const auto& [file, sum] : c.checksums) writer_.set_attr("/", kChecksumPrefix + file, sum);
  put_file_stats(c.file_stats);
}

}  // namespace tdiff
