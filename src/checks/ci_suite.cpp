#include "checks/ci_suite.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "checks/determinism.h"
#include "exec/mixed_run.h"
#include "casefile/case_file.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "backend/executor.h"
#include "model/pattern.h"
#include "casefile/session.h"
#include "synth/synth.h"
#include "base/version.h"
#include "emu/emu_backend.h"
#include "refcpu/linear.h"
#include "refcpu/refcpu_backend.h"

namespace fs = std::filesystem;

namespace tdiff {

namespace {

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed");
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

// A file a suite names must lie in the suite's folder (symbolic links followed): a suite is
// shared like a case, and must not make tdiff read /etc/passwd.
std::string inside_suite(const std::string& suite_file, const std::string& dir, const char* key, const std::string& value) {
  const fs::path p = (fs::path(dir) / value).lexically_normal();
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(p, ec), root = fs::weakly_canonical(fs::absolute(dir), ec);
  const auto rel = real.lexically_relative(root);
  if (fs::path(value).is_absolute() || rel.empty() || *rel.begin() == "..")
    input_error("{}: {} = \"{}\" is outside the suite's folder {} (files a suite names must lie in its folder)",
                suite_file, key, value, root.string());
  return p.string();
}

// Typed access to suite.toml with errors naming the file and line.
struct TomlReader {
  std::string path;
  std::string where(const toml::node& n, const std::string& what) const {
    const auto line = n.source().begin.line;
    return line ? fmt::format("{}:{}: {}", path, line, what) : fmt::format("{}: {}", path, what);
  }
  void check_keys(const toml::table& t, const std::set<std::string>& known, const std::string& what) const {
    for (const auto& [k, v] : t)
      if (!known.count(std::string(k.str())))
        input_error("{}", where(v, fmt::format("unknown key '{}' in {}", k.str(), what)));
  }
  std::string str(const toml::table& t, const char* key, const std::string& what, bool required, std::string def = "") const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) input_error("{}: {} has no '{}'", path, what, key);
      return def;
    }
    auto v = n->value<std::string>();
    if (!v) input_error("{}", where(*n, fmt::format("{}: '{}' must be a string", what, key)));
    return *v;
  }
  std::int64_t integer(const toml::table& t, const char* key, const std::string& what, bool required, std::int64_t def = 0,
                       std::int64_t min = 0, std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) input_error("{}: {} has no '{}'", path, what, key);
      return def;
    }
    auto v = n->as_integer();
    if (!v) input_error("{}", where(*n, fmt::format("{}: '{}' must be an integer", what, key)));
    if (v->get() < min) input_error("{}", where(*n, fmt::format("{}: '{}' must be at least {}", what, key, min)));
    if (v->get() > max) input_error("{}", where(*n, fmt::format("{}: '{}' must be at most {}", what, key, max)));
    return v->get();
  }
};

std::string read_bytes(const std::string& path) {
  if (!fs::is_regular_file(path)) input_error("file not found: {}", path);
  return read_text_file(path);
}

}  // namespace

Suite load_suite(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "suite.toml" : fs::path(path);
  if (!fs::is_regular_file(file)) input_error("{}: no suite.toml (a golden prompt set is a folder with suite.toml)", path);
  const std::string fpath = fs::absolute(file).lexically_normal().string();
  TomlReader rd{fpath};
  toml::table doc;
  try {
    doc = toml::parse_file(fpath);
  } catch (const toml::parse_error& e) {
    input_error("{}:{}: {}", fpath, e.source().begin.line, e.description());
  }
  rd.check_keys(doc, {"name", "description", "tokens", "thresholds", "repeat", "selections", "model", "case"}, "the suite");
  Suite s;
  s.dir = fs::path(fpath).parent_path().string();
  s.name = rd.str(doc, "name", "the suite", false, fs::path(s.dir).filename().string());
  s.description = rd.str(doc, "description", "the suite", false);
  s.tokens_file = inside_suite(fpath, s.dir, "tokens", rd.str(doc, "tokens", "the suite", true));
  const std::string thr = rd.str(doc, "thresholds", "the suite", false);
  if (!thr.empty()) s.thresholds_file = inside_suite(fpath, s.dir, "thresholds", thr);
  s.repeat = static_cast<int>(rd.integer(doc, "repeat", "the suite", false, 2, 1, 100));  // as --repeat
  const std::string selections = rd.str(doc, "selections", "the suite", false, "replay");
  if (selections != "replay" && selections != "free")
    input_error("{}: selections = \"{}\": expected \"replay\" or \"free\"", fpath, selections);
  s.replay_selections = selections == "replay";

  const toml::table* model = doc["model"].as_table();
  if (!model) input_error("{}: no [model] table (preset, seed)", fpath);
  rd.check_keys(*model, {"preset", "seed", "layers"}, "[model]");
  s.preset = rd.str(*model, "preset", "[model]", true);
  synth_preset(s.preset);  // an unknown preset names the known ones
  s.model_seed = static_cast<std::uint64_t>(rd.integer(*model, "seed", "[model]", true));
  s.layers = rd.integer(*model, "layers", "[model]", false, 0, 1);

  const ModelConfig config = synth_preset(s.preset);
  const PromptSet prompts = read_token_file(s.tokens_file, config.vocab_size);
  const toml::array* cases = doc["case"].as_array();
  if (!cases || cases->empty()) input_error("{}: no [[case]]", fpath);
  std::set<std::string> names;
  for (const auto& node : *cases) {
    const toml::table* t = node.as_table();
    const std::string what = fmt::format("case {}", s.cases.size() + 1);
    if (!t) input_error("{}", rd.where(node, what + " must be a table"));
    rd.check_keys(*t, {"name", "about", "prompts", "pad_side", "pad_to", "seed"}, what);
    SuiteCase c;
    c.name = rd.str(*t, "name", what, true);
    if (c.name.empty() || c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
      input_error("{}", rd.where(node, fmt::format("{}: name '{}' must be lower-case letters, digits, '-' or '_'", what, c.name)));
    if (!names.insert(c.name).second) input_error("{}", rd.where(node, fmt::format("case name '{}' used twice", c.name)));
    c.about = rd.str(*t, "about", what, false);
    const toml::array* ps = (*t)["prompts"].as_array();
    if (!ps || ps->empty()) input_error("{}", rd.where(node, fmt::format("case '{}': 'prompts' must list prompt numbers", c.name)));
    for (const auto& p : *ps) {
      auto v = p.as_integer();
      if (!v || v->get() < 1 || v->get() > static_cast<std::int64_t>(prompts.ids.size()))
        input_error("{}", rd.where(p, fmt::format("case '{}': prompt numbers run from 1 to {} ({} holds {} prompts)", c.name,
                                                  prompts.ids.size(), s.tokens_file, prompts.ids.size())));
      c.prompts.push_back(static_cast<int>(v->get()));
    }
    c.pad_side = rd.str(*t, "pad_side", what, false, "right");
    if (c.pad_side != "right" && c.pad_side != "left")
      input_error("{}", rd.where(node, fmt::format("case '{}': pad_side must be \"right\" or \"left\"", c.name)));
    c.pad_to = rd.integer(*t, "pad_to", what, false, 0, 0, config.max_position_embeddings);
    c.seed = static_cast<std::uint64_t>(rd.integer(*t, "seed", what, true));
    for (int p : c.prompts)
      if (c.pad_to > 0 && static_cast<std::int64_t>(prompts.ids[static_cast<std::size_t>(p - 1)].size()) > c.pad_to)
        input_error("{}", rd.where(node, fmt::format("case '{}': prompt {} has {} tokens, more than pad_to = {}", c.name, p,
                                                     prompts.ids[static_cast<std::size_t>(p - 1)].size(), c.pad_to)));
    s.cases.push_back(std::move(c));
  }
  if (!s.thresholds_file.empty()) load_thresholds(s.thresholds_file);  // its errors now, not after the build
  s.hash = sha256_hex(fmt::format("tdiff-ci-cache 1\n{}\n{}\n", TDIFF_VERSION, TDIFF_GIT_COMMIT) + read_bytes(fpath) +
                      "\n" + read_bytes(s.tokens_file));
  return s;
}

// ---- The cache ----------------------------------------------------------------------------

namespace {

// The float64 reference of every stage into the case's /reference, with the run's record.
void store_reference(const std::string& case_file) {
  CaseSession session = open_session(case_file);
  RunContext ctx = session.context();
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(session.info.batch, env);
  CaseUpdate update(case_file);
  update.clear_reference();
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& out) {
    for (std::size_t k = 0; k < out.size(); ++k) update.put_reference(s.name, s.outputs[k], out[k]);
  };
  execute(session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, hooks);
  const std::string run_id = make_run_id("golden");
  EnvRecord rec = capture_env("refcpu", "float64", process_command_line());
  rec.extra["tie_rule"] = "lowest-index";
  rec.extra["blas"] = refcpu::blas_core();
  rec.extra["stages"] = "*";
  add_case_facts(rec, case_file, session.info.checksums);
  update.put_env(run_id, rec);
  update.writer().set_attr("/reference", "tie_rule", "lowest-index");
  update.writer().set_attr("/reference", "env", run_id);
  update.commit();
}

void build_case(const Suite& suite, const SuiteCase& c, const std::string& model_dir, const std::string& out) {
  CaseInfo info = case_for_model(model_dir);
  const PromptSet all = read_token_file(suite.tokens_file, info.config.vocab_size);
  PromptSet ps;
  ps.source = suite.tokens_file;
  for (int p : c.prompts) {
    const auto i = static_cast<std::size_t>(p - 1);
    ps.ids.push_back(all.ids[i]);
    ps.lines.push_back(all.lines[i]);
    ps.line_no.push_back(all.line_no[i]);
  }
  info.batch = pad_prompts(ps, c.pad_to, c.pad_side == "left", info.config.vocab_size);
  info.seed = c.seed;
  info.pad_to = c.pad_to;
  info.pad_side = c.pad_side;
  info.prompts = ps.lines;
  add_weight_checksums(info);
  create_case(out, info);
  store_reference(out);
}

}  // namespace

namespace {
// Runs `build` unless `marker` exists, then writes the marker (a part without one is redone).
bool build_once(const std::string& marker, const std::function<void()>& build) {
  if (fs::is_regular_file(marker)) return false;
  build();
  std::ofstream f(marker);
  f << fmt::format("tdiff {} {}\n", TDIFF_VERSION, TDIFF_GIT_COMMIT);
  if (!f) input_error("cannot write {}", marker);
  return true;
}

// Holds the cache folder's lock: one builder at a time (two ci runs on one machine share it).
struct CacheLock {
  int fd;
  explicit CacheLock(const std::string& root) : fd(::open((root + "/lock").c_str(), O_CREAT | O_RDWR, 0644)) {
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
      if (fd >= 0) ::close(fd);
      input_error("cannot lock the cache folder {}", root);
    }
  }
  ~CacheLock() { ::close(fd); }
};
}  // namespace

SuiteCache prepare_suite_cache(const Suite& suite, std::string cache_root, bool rebuild, const CiProgress& progress,
                               const std::vector<const SuiteCase*>& cases) {
  if (cache_root.empty()) cache_root = suite.dir + "/cache";
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(cache_root, ec);
  if (ec) input_error("cannot create the cache folder {}: {}", cache_root, ec.message());
  SuiteCache cache;
  cache.dir = fs::absolute(fs::path(cache_root) / suite.hash.substr(0, 16)).lexically_normal().string();
  const CacheLock lock(cache_root);
  const std::string done = cache.dir + "/COMPLETE";
  if (!rebuild && fs::is_regular_file(done)) return cache;

  if (rebuild) fs::remove_all(cache.dir);
  fs::create_directories(cache.dir);
  const bool model_built = build_once(cache.dir + "/model.done", [&] {
    ModelConfig config = synth_preset(suite.preset);
    if (suite.layers > 0) config.truncate_layers(suite.layers);
    if (progress) progress(fmt::format("model: synth preset {} seed {}", suite.preset, suite.model_seed));
    fs::remove_all(cache.model_dir());
    write_synth_model(config, suite.model_seed, cache.model_dir());
  });
  if (model_built) cache.built_parts.push_back("model");
  for (const SuiteCase* c : cases)
    if (build_once(cache.case_file(*c) + ".done", [&] {
          if (progress) progress(fmt::format("case {}: inputs and float64 reference", c->name));
          build_case(suite, *c, cache.model_dir(), cache.case_file(*c));
        }))
      cache.built_parts.push_back(c->name);
  bool all = true;
  for (const auto& c : suite.cases) all = all && fs::is_regular_file(cache.case_file(c) + ".done");
  if (all) build_once(done, [] {});
  cache.built = !cache.built_parts.empty();
  // Older keys of this suite are stale.
  if (cache.built)
    for (const auto& e : fs::directory_iterator(cache_root))
      if (e.is_directory() && e.path() != fs::path(cache.dir)) fs::remove_all(e.path(), ec);
  cache.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cache;
}

}  // namespace tdiff
