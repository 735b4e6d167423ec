#include "app/ci_suite.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "app/case_workflows.h"
#include "app/envelope.h"
#include "checks/determinism.h"
#include "exec/mixed_run.h"
#include "casefile/case_file.h"
#include "casefile/env_record.h"
#include "base/error.h"
#include "base/sha256.h"
#include "backend/executor.h"
#include "model/pattern.h"
#include "model/schedule.h"
#include "casefile/session.h"
#include "synth/synth.h"
#include "synth/synth_profile.h"
#include "base/version.h"
#include "emu/emu_backend.h"
#include "refcpu/linear.h"
#include "refcpu/refcpu_backend.h"

namespace fs = std::filesystem;

namespace tdiff {

namespace {

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

// [model] (`base` null) or a [models.NAME] table (`base`: [model], whose keys it inherits).
SuiteModel read_suite_model(const TomlReader& rd, const toml::table& t, const std::string& what,
                            const SuiteModel* base) {
  rd.check_keys(t, {"preset", "seed", "layers", "profile", "outliers"}, what);
  SuiteModel m = base ? *base : SuiteModel{};
  m.preset = rd.str(t, "preset", what, !base, m.preset);
  const auto& presets = synth_preset_names();
  if (std::find(presets.begin(), presets.end(), m.preset) == presets.end())
    input_error("{}", rd.where(*t.get("preset"), fmt::format("{}: unknown preset '{}' (known: {})", what, m.preset,
                                                             fmt::join(presets, ", "))));
  m.seed = static_cast<std::uint64_t>(rd.integer(t, "seed", what, !base, static_cast<std::int64_t>(m.seed)));
  const std::int64_t most = synth_preset(m.preset).num_hidden_layers;
  m.layers = rd.integer(t, "layers", what, false, m.layers, 1, most);
  if (m.layers > most)  // [model]'s, on a preset with fewer layers
    input_error("{}", rd.where(t, fmt::format("{}: layers = {} (from [model]) but preset {} has {}", what, m.layers,
                                              m.preset, most)));
  const std::string profile = rd.str(t, "profile", what, false, synth_profile_name(m.profile));
  const auto& profiles = synth_profile_names();
  if (std::find(profiles.begin(), profiles.end(), profile) == profiles.end())
    input_error("{}", rd.where(*t.get("profile"), fmt::format("{}: unknown profile '{}' (known: {})", what, profile,
                                                              fmt::join(profiles, ", "))));
  m.profile = parse_synth_profile(profile);
  if (const toml::node* n = t.get("outliers")) {
    const auto* b = n->as_boolean();
    if (!b) input_error("{}", rd.where(*n, fmt::format("{}: 'outliers' must be true or false", what)));
    m.outliers = b->get();
  }
  if (m.profile == SynthProfile::trained && m.outliers)
    input_error("{}", rd.where(t, fmt::format("{}: outliers = true with profile = \"trained\": the trained profile has "
                                              "its own massive activations (tdiff synth takes one of them)",
                                              what)));
  return m;
}

// [model] and every [models.NAME], each with its folder in the cache.
std::vector<SuiteModel> read_models(const TomlReader& rd, const toml::table& doc) {
  const toml::table* model = doc["model"].as_table();
  if (!model) input_error("{}: no [model] table (preset, seed)", rd.path);
  std::vector<SuiteModel> models{read_suite_model(rd, *model, "[model]", nullptr)};
  models[0].folder = "model";
  if (const toml::node* named = doc.get("models")) {
    const toml::table* t = named->as_table();
    if (!t) input_error("{}", rd.where(*named, "'models' must hold tables: [models.NAME]"));
    for (const auto& [key, node] : *t) {
      const std::string name(key.str()), what = fmt::format("[models.{}]", name);
      if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
        input_error("{}",
                    rd.where(node, fmt::format("{}: the name must be lower-case letters, digits, '-' or '_'", what)));
      if (!node.is_table()) input_error("{}", rd.where(node, what + " must be a table"));
      SuiteModel m = read_suite_model(rd, *node.as_table(), what, &models[0]);
      m.name = name;
      m.folder = "model-" + name;
      for (const auto& earlier : models)
        if (earlier.same_definition(m)) {
          m.folder = earlier.folder;
          break;
        }
      models.push_back(std::move(m));
    }
  }
  return models;
}

// The index in `models` of the model a case names ("model = NAME"; none: [model]).
std::size_t case_model(const TomlReader& rd, const toml::table& t, const std::string& what,
                       const std::vector<SuiteModel>& models) {
  if (!t.contains("model")) return 0;
  const std::string name = rd.str(t, "model", what, false);
  std::vector<std::string> known;
  for (std::size_t i = 1; i < models.size(); ++i) {
    if (models[i].name == name) return i;
    known.push_back(models[i].name);
  }
  const std::string have = known.empty() ? "the suite has none" : fmt::format("known: {}", fmt::join(known, ", "));
  input_error("{}", rd.where(*t.get("model"), fmt::format("{}: model = \"{}\" names no [models.{}] table ({})", what,
                                                          name, name, have)));
}

// The prompts of a case as the case file will hold them.
PromptSet case_prompts(const SuiteCase& c, const PromptSet& all) {
  PromptSet p;
  p.source = all.source;
  for (int n : c.prompts) {
    const auto i = static_cast<std::size_t>(n - 1);
    p.ids.push_back(all.ids[i]);
    p.lines.push_back(all.lines[i]);
    p.line_no.push_back(all.line_no[i]);
  }
  return p;
}

// A [[case]]'s decode and prefill_chunks, checked against its rows as `case new --decode
// --prefill-chunks` checks them (model/schedule.h), the message naming the suite's line.
void read_case_schedule(const TomlReader& rd, const toml::table& t, SuiteCase& c, std::int64_t vocab,
                        const PromptSet& prompts) {
  const std::string what = fmt::format("case '{}'", c.name);
  c.decode = rd.integer(t, "decode", what, false, 0, 0, std::numeric_limits<std::int32_t>::max());
  if (const toml::node* n = t.get("prefill_chunks")) {
    const toml::array* a = n->as_array();
    if (!a || a->empty()) input_error("{}", rd.where(*n, what + ": prefill_chunks must list positive token counts"));
    for (const auto& v : *a) {
      const auto x = v.as_integer();
      if (!x || x->get() < 1) input_error("{}", rd.where(v, what + ": prefill_chunks must list positive token counts"));
      c.prefill_chunks.push_back(x->get());
    }
  }
  if (c.decode == 0 && c.prefill_chunks.empty()) return;
  const Batch batch = pad_prompts(case_prompts(c, prompts), c.pad_to, c.pad_side == "left", vocab);
  Schedule::make(batch, c.decode, c.prefill_chunks, rd.where(t, what + ": decode/prefill_chunks"));
}

// One [[case]] (`s`: the suite read so far: its models and earlier cases).
SuiteCase read_suite_case(const TomlReader& rd, const toml::node& node, const std::string& what, const Suite& s,
                          const PromptSet& prompts) {
  const toml::table* t = node.as_table();
  if (!t) input_error("{}", rd.where(node, what + " must be a table"));
  rd.check_keys(*t, {"name", "about", "model", "prompts", "pad_side", "pad_to", "seed", "decode", "prefill_chunks"}, what);
  SuiteCase c;
  c.name = rd.str(*t, "name", what, true);
  if (c.name.empty() || c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
    input_error("{}", rd.where(node, fmt::format("{}: name '{}' must be lower-case letters, digits, '-' or '_'", what,
                                                 c.name)));
  for (const auto& other : s.cases)
    if (other.name == c.name) input_error("{}", rd.where(node, fmt::format("case name '{}' used twice", c.name)));
  c.about = rd.str(*t, "about", what, false);
  c.model = case_model(rd, *t, fmt::format("case '{}'", c.name), s.models);
  const toml::array* ps = (*t)["prompts"].as_array();
  if (!ps || ps->empty())
    input_error("{}", rd.where(node, fmt::format("case '{}': 'prompts' must list prompt numbers", c.name)));
  for (const auto& p : *ps) {
    auto v = p.as_integer();
    if (!v || v->get() < 1 || v->get() > static_cast<std::int64_t>(prompts.ids.size()))
      input_error("{}", rd.where(p, fmt::format("case '{}': prompt numbers run from 1 to {} ({} holds {} prompts)",
                                                c.name, prompts.ids.size(), s.tokens_file, prompts.ids.size())));
    c.prompts.push_back(static_cast<int>(v->get()));
  }
  c.pad_side = rd.str(*t, "pad_side", what, false, "right");
  if (c.pad_side != "right" && c.pad_side != "left")
    input_error("{}", rd.where(node, fmt::format("case '{}': pad_side must be \"right\" or \"left\"", c.name)));
  c.pad_to = rd.integer(*t, "pad_to", what, false, 0, 0, s.model_of(c).config().max_position_embeddings);
  c.seed = static_cast<std::uint64_t>(rd.integer(*t, "seed", what, true));
  for (int p : c.prompts)
    if (c.pad_to > 0 && static_cast<std::int64_t>(prompts.ids[static_cast<std::size_t>(p - 1)].size()) > c.pad_to)
      input_error("{}", rd.where(node, fmt::format("case '{}': prompt {} has {} tokens, more than pad_to = {}", c.name,
                                                   p, prompts.ids[static_cast<std::size_t>(p - 1)].size(), c.pad_to)));
  read_case_schedule(rd, *t, c, s.model_of(c).config().vocab_size, prompts);
  return c;
}

}  // namespace

ModelConfig SuiteModel::config() const {
  ModelConfig c = synth_preset(preset);
  if (layers > 0) c.truncate_layers(layers);
  return c;
}

SynthOptions SuiteModel::synth_options() const {
  SynthOptions o;
  o.outliers = outliers;
  o.profile = profile;
  return o;
}

std::string SuiteModel::describe() const {
  std::string d = fmt::format("preset {} seed {}", preset, seed);
  if (layers > 0) d += fmt::format(", {} layers", layers);
  if (profile != SynthProfile::standard) d += fmt::format(", {} profile", synth_profile_name(profile));
  if (outliers) d += ", outliers";
  return d;
}

bool SuiteModel::same_definition(const SuiteModel& o) const {
  return preset == o.preset && seed == o.seed && config().num_hidden_layers == o.config().num_hidden_layers &&
         profile == o.profile && outliers == o.outliers;
}

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
  rd.check_keys(doc, {"name", "description", "tokens", "thresholds", "repeat", "selections", "model", "models", "case"},
                "the suite");
  Suite s;
  s.dir = fs::path(fpath).parent_path().string();
  s.name = rd.str(doc, "name", "the suite", false, fs::path(s.dir).filename().string());
  // It names the report folder (reports/ci/<name>/<run-id>), so it follows the run id's rule.
  if (doc.contains("name")) app::check_run_id(s.name, fpath + ": name");
  s.description = rd.str(doc, "description", "the suite", false);
  s.tokens_file = inside_suite(fpath, s.dir, "tokens", rd.str(doc, "tokens", "the suite", true));
  const std::string thr = rd.str(doc, "thresholds", "the suite", false);
  if (!thr.empty()) s.thresholds_file = inside_suite(fpath, s.dir, "thresholds", thr);
  s.repeat = static_cast<int>(rd.integer(doc, "repeat", "the suite", false, 2, 1, 100));  // as --repeat
  const std::string selections = rd.str(doc, "selections", "the suite", false, "replay");
  if (selections != "replay" && selections != "free")
    input_error("{}: selections = \"{}\": expected \"replay\" or \"free\"", fpath, selections);
  s.replay_selections = selections == "replay";
  s.models = read_models(rd, doc);

  // Every prompt must be a token of every model the suite names.
  std::int64_t vocab = std::numeric_limits<std::int64_t>::max();
  for (const auto& m : s.models) vocab = std::min(vocab, m.config().vocab_size);
  const PromptSet prompts = read_token_file(s.tokens_file, vocab);
  const toml::array* cases = doc["case"].as_array();
  if (!cases || cases->empty()) input_error("{}: no [[case]]", fpath);
  for (const auto& node : *cases)
    s.cases.push_back(read_suite_case(rd, node, fmt::format("case {}", s.cases.size() + 1), s, prompts));
  if (!s.thresholds_file.empty()) load_thresholds(s.thresholds_file);  // its errors now, not after the build
  s.hash = bytes_sha256(fmt::format("tdiff-ci-cache 1\n{}\n{}\n", TDIFF_VERSION, TDIFF_GIT_COMMIT) + read_bytes(fpath) +
                      "\n" + read_bytes(s.tokens_file));
  return s;
}

// ---- The cache ----------------------------------------------------------------------------

namespace {

// The float64 reference of every stage into the case's /reference, with the run's record.
void build_case(const Suite& suite, const SuiteCase& c, const std::string& model_dir, const std::string& out) {
  app::CaseRequest request;
  request.model_dir = model_dir;
  request.prompts = case_prompts(c, read_token_file(suite.tokens_file, case_for_model(model_dir).config.vocab_size));
  request.prompts.source = suite.tokens_file;
  request.decode = c.decode;
  request.chunks = c.prefill_chunks;
  request.pad_to = c.pad_to;
  request.pad_left = c.pad_side == "left";
  request.seed = c.seed;
  request.replace = true;  // the cache's own file, rebuilt when it is not marked done
  app::make_case(request, out);
  CaseSession session = open_session(out);
  app::write_reference(session, {});
}

}  // namespace

namespace {

// A part of the cache (the model folder, one case file) is marked done by a file beside it
// that may list the part's files with their sizes ("<bytes> <name>" under a "tdiff <version>"
// line, names relative to the cache folder), and a check of its own: a part whose files are
// gone or not what they were (a copy cut short, a full disk, someone's cleanup) is noticed and
// built again instead of being listed as ready. The model's files never change once built; a
// case file grows with every run ci records in it, so it is read instead (HDF5 knows its own
// length: a cut file does not open).
struct CachePart {
  std::string marker;                               // <part>.done
  std::function<std::vector<std::string>()> files;  // the part's files, once built
  std::function<void()> build;
  std::function<std::string()> check = [] { return std::string(); };  // "" or why the files are unusable
};

// Why the part `marker` describes cannot be used as it is ("" when it can).
std::string damaged_part(const std::string& dir, const CachePart& part) {
  std::ifstream in(part.marker);
  std::string line;
  std::getline(in, line);  // "tdiff <version> <commit>"
  std::uintmax_t size = 0;
  std::string name;
  while (in >> size && std::getline(in >> std::ws, name)) {
    std::error_code ec;
    const auto now = fs::file_size(fs::path(dir) / name, ec);
    if (ec) return fmt::format("{} is missing", name);
    if (now != size) return fmt::format("{} has {} bytes, {} when it was built", name, now, size);
  }
  return part.check();
}

// Removes `file` for the cache; InputError naming it when it is there and cannot go.
void remove_cache_file(const fs::path& file) {
  std::error_code ec;
  fs::remove(file, ec);
  if (ec) input_error("{}: cannot remove it from the cache ({})", file.string(), ec.message());
}

// Builds the part unless its marker says it is there and it is still whole; then writes the
// marker. True when it built.
bool build_once(const std::string& dir, const CachePart& part, const CiProgress& progress) {
  if (std::error_code ec; fs::is_regular_file(part.marker, ec)) {
    const std::string why = damaged_part(dir, part);
    if (why.empty()) return false;
    if (progress)
      progress(fmt::format("{} again: the cached copy is damaged ({})", fs::path(part.marker).stem().string(), why));
    remove_cache_file(part.marker);
    remove_cache_file(fs::path(dir) / "COMPLETE");
  }
  part.build();
  std::string text = fmt::format("tdiff {} {}\n", TDIFF_VERSION, TDIFF_GIT_COMMIT);
  for (const auto& f : part.files()) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec) input_error("{}: cannot read its size for the cache's record ({})", f, ec.message());
    text += fmt::format("{} {}\n", size, fs::path(f).lexically_relative(dir).string());
  }
  std::ofstream out(part.marker);
  out << text;
  out.close();
  if (!out) {
    std::error_code ec;
    fs::remove(part.marker, ec);  // a marker cut short would vouch for less than the part
    input_error("cannot write {}", part.marker);
  }
  return true;
}

// Holds the cache folder's lock: one builder at a time (two ci runs on one machine share it).
// The cache folder is made first, and `made` collects the folders this process made for it. A
// run that fails removes the cache folder it made, lock file and all, while a second run may be
// waiting on that file: a lock on a removed file locks nothing, so the waiter makes the folder
// and the lock file anew and waits again.
struct CacheLock {
  int fd = -1;
  CacheLock(const std::string& root, std::vector<fs::path>& made) {
    const std::string file = root + "/lock";
    for (int tries = 0;; ++tries) {
      std::error_code ec;
      for (auto& p : make_folders(root, ec)) made.push_back(std::move(p));
      if (ec) {
        remove_empty_folders(made);  // no undo holds them yet
        input_error("cannot create the cache folder {} ({})", root, ec.message());
      }
      fd = ::open(file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
        const int err = errno;
        if (fd >= 0) ::close(fd);
        remove_empty_folders(made);
        input_error("cannot lock the cache folder {} ({})", root, std::strerror(err));
      }
      struct stat held {}, named {};
      if (::fstat(fd, &held) == 0 && ::stat(file.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
          held.st_ino == named.st_ino)
        return;
      ::close(fd);
      if (tries == 100) input_error("cannot lock the cache folder {} (its lock file keeps being removed)", root);
    }
  }
  ~CacheLock() { ::close(fd); }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
};

// What one preparation created, removed again when it stops on an error (a full disk, a
// damaged model), so that a failed ci leaves no tree and no half-built part behind: the key's
// folder when it made it, else the part it was building; then the cache folder and its parents
// when it made them and nothing but the lock file is in them. Everything is decided from what
// this process made, after it took the lock, and undone before it lets the lock go (declared
// after the lock), so no other run's folder is removed.
struct CacheUndo {
  fs::path root;                    // the cache folder
  std::vector<fs::path> root_made;  // it and its parents, those this call made
  fs::path key;                     // the key's folder when this call made it ("" none)
  fs::path building;                // the part being built
  bool done = false;
  ~CacheUndo() {
    if (done) return;
    std::error_code ec;
    fs::remove_all(key.empty() ? building : key, ec);
    if (root_made.empty() || root_made.back() != root) return;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename() != "lock") return;  // another run's key: the folder is in use
    if (ec) return;
    fs::remove(root / "lock", ec);
    remove_empty_folders(root_made);
  }
};

// The files of the model folder, for its marker.
std::vector<std::string> folder_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::error_code type; it->is_regular_file(type)) out.push_back(it->path().string());
  if (ec) input_error("{}: cannot list the folder ({})", dir, ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// A cheap read of a cached case: it is there, opens as a case and holds its reference.
std::string unreadable_case(const std::string& file) {
  if (std::error_code ec; !fs::is_regular_file(file, ec))
    return fmt::format("{} is missing", fs::path(file).filename().string());
  try {
    read_case(file);
    if (reference_stages(file).empty()) return fmt::format("{} holds no reference", fs::path(file).filename().string());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The models the cases run on, one per cache folder, in the order the cases first name them.
std::vector<const SuiteModel*> models_of(const Suite& suite, const std::vector<const SuiteCase*>& cases) {
  std::vector<const SuiteModel*> out;
  for (const SuiteCase* c : cases) {
    const SuiteModel& m = suite.model_of(*c);
    if (std::none_of(out.begin(), out.end(), [&](const SuiteModel* o) { return o->folder == m.folder; }))
      out.push_back(&m);
  }
  return out;
}

// One model folder of the cache (marker <folder>.done): tdiff synth of its definition.
CachePart model_part(const SuiteCache& cache, const SuiteModel& m, const CiProgress& progress) {
  const std::string dir = cache.model_dir(m);
  return CachePart{cache.dir + "/" + m.folder + ".done", [dir] { return folder_files(dir); },
                   [dir, &m, progress] {
                     if (progress) progress(fmt::format("{}: synth {}", m.folder, m.describe()));
                     std::error_code rm;
                     fs::remove_all(dir, rm);
                     if (rm) input_error("{}: cannot remove the old model ({})", dir, rm.message());
                     write_synth_model(m.config(), m.seed, dir, {}, m.synth_options());
                   }};
}

}  // namespace

// The folder `dir` as make_folders names what it made: absolute, normal, no trailing '/'.
fs::path absolute_folder(const fs::path& dir, std::error_code& ec) {
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();
  return p;
}

std::vector<fs::path> make_folders(const fs::path& dir, std::error_code& ec) {
  std::vector<fs::path> made;
  const fs::path target = absolute_folder(dir, ec);
  if (ec) return made;
  fs::path at;
  for (const auto& part : target) {
    at /= part;
    if (std::error_code probe; fs::is_directory(at, probe)) continue;  // there already: not ours
    if (fs::create_directory(at, ec)) {
      made.push_back(at);
    } else if (ec) {
      // mkdir says "File exists" of a file in the way; what is wrong is that it is no folder
      if (ec == std::errc::file_exists) ec = std::make_error_code(std::errc::not_a_directory);
      remove_empty_folders(made);
      return {};
    }  // else another process made it between the two calls: not ours
  }
  return made;
}

void remove_empty_folders(const std::vector<fs::path>& made) {
  for (auto it = made.rbegin(); it != made.rend(); ++it)
    if (std::error_code ec; !fs::remove(*it, ec) && ec) return;  // not empty: its parents are not either
}

SuiteCache prepare_suite_cache(const Suite& suite, std::string cache_root, bool rebuild, const CiProgress& progress,
                               const std::vector<const SuiteCase*>& cases) {
  if (cache_root.empty()) cache_root = suite.dir + "/cache";
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  SuiteCache cache;
  const fs::path root = absolute_folder(cache_root, ec);
  if (ec) input_error("cannot create the cache folder {} ({})", cache_root, ec.message());
  cache.dir = (root / suite.hash.substr(0, 16)).string();
  std::vector<fs::path> root_made;
  const CacheLock lock(cache_root, root_made);
  CacheUndo undo;
  undo.root = root;
  undo.root_made = root_made;
  if (rebuild) fs::remove_all(cache.dir, ec);
  if (ec) input_error("{}: cannot remove the cached copy to build it again ({})", cache.dir, ec.message());
  if (!make_folders(cache.dir, ec).empty()) undo.key = cache.dir;
  if (ec) input_error("cannot create the cache folder {} ({})", cache.dir, ec.message());
  for (const SuiteModel* m : models_of(suite, cases)) {
    undo.building = cache.model_dir(*m);
    if (build_once(cache.dir, model_part(cache, *m, progress), progress)) cache.built_parts.push_back(m->folder);
  }
  for (const SuiteCase* c : cases) {
    const std::string file = cache.case_file(*c);
    undo.building = file;
    CachePart part{file + ".done", [] { return std::vector<std::string>{}; },
                   [&] {
                     if (progress) progress(fmt::format("case {}: inputs and float64 reference", c->name));
                     build_case(suite, *c, cache.model_dir(suite.model_of(*c)), file);
                   }};
    part.check = [&] { return unreadable_case(file); };
    if (build_once(cache.dir, part, progress)) cache.built_parts.push_back(c->name);
  }
  undo.done = true;
  bool all = true;
  for (const auto& c : suite.cases) all = all && fs::is_regular_file(cache.case_file(c) + ".done", ec);
  if (all && !fs::is_regular_file(cache.dir + "/COMPLETE", ec))
    std::ofstream(cache.dir + "/COMPLETE") << fmt::format("tdiff {} {}\n", TDIFF_VERSION, TDIFF_GIT_COMMIT);
  cache.built = !cache.built_parts.empty();
  // Older keys of this suite are stale (housekeeping: one that cannot go is left).
  if (cache.built)
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
      if (std::error_code type; it->is_directory(type) && it->path() != fs::path(cache.dir)) {
        std::error_code rm;
        fs::remove_all(it->path(), rm);
      }
  cache.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cache;
}

}  // namespace tdiff
