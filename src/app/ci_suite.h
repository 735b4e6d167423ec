#pragma once
// Golden prompt sets and `tdiff ci` (cases/README.md): a suite is a folder with suite.toml,
//
//   name = "tiny"
//   description = "..."
//   tokens = "golden.txt"            # token ids, one prompt per line: prompt N is line N
//   thresholds = "thresholds.toml"   # verdict rules (diff/README.md); omitted: the defaults
//   repeat = 2                       # candidate runs per case, each with its own run seed;
//                                    # all must agree bit for bit (1: no determinism gate)
//   selections = "replay"            # or "free": as tdiff run --selections (bisect/mixed_run.h);
//                                    # replayed, the accuracy run is one more run: the
//                                    # `repeat` determinism runs follow their own choices
//   [model]                          # the model of every case that names no other
//   preset = "tiny"                  # tdiff synth preset
//   seed = 1
//   layers = 4                       # optional: keep the first N layers
//   profile = "trained"              # optional: tdiff synth --profile (default "default")
//   outliers = true                  # optional: tdiff synth --outliers (default false)
//   [models.trained]                 # optional, any number: a variant of [model]; the keys it
//   profile = "trained"              # leaves out are [model]'s
//   [[case]]                         # one batch = one case file
//   name = "short-right"
//   about = "..."                    # optional
//   model = "trained"                # optional: a [models.NAME] (default: [model])
//   prompts = [1, 2, 3]              # prompt numbers (lines of the token file)
//   pad_side = "right"               # or "left"
//   pad_to = 12                      # 0: the longest prompt
//   seed = 101                       # the case's seed; the candidate's run seeds are seed, seed+1, ...
//   decode = 16                      # optional: a generation case, the rows' last 16 tokens decoded
//   prefill_chunks = [5, 3, 24]      # optional: the prompt prefilled in these chunks (default whole)
//
// Every model and every case with its float64 reference are built once into a cache folder
// keyed by a SHA-256 of suite.toml, the token file and the tdiff version and commit; a change
// to any of them builds a fresh cache.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checks/determinism.h"
#include "casefile/env_record.h"
#include "numerics/policy.h"
#include "diff/compare.h"
#include "history/run_entry.h"
#include "diff/thresholds.h"
#include "exec/candidate_dump.h"
#include "model/config.h"
#include "synth/synth_options.h"

namespace tdiff {

// One synthetic model of a suite: [model], or a [models.NAME] variant of it.
struct SuiteModel {
  std::string name;  // "" for [model], NAME for [models.NAME]
  std::string preset;
  std::uint64_t seed = 0;
  std::int64_t layers = 0;  // 0: all
  SynthProfile profile = SynthProfile::standard;
  bool outliers = false;
  // Its folder in the cache: "model" for [model], "model-NAME" for the others; a model defined
  // exactly as an earlier one shares that one's folder (each distinct model is built once).
  std::string folder;
  ModelConfig config() const;  // the preset, cut to `layers`
  SynthOptions synth_options() const;
  std::string describe() const;  // "preset tiny seed 1, trained profile"
  bool same_definition(const SuiteModel& o) const;
};

struct SuiteCase {
  std::string name, about;
  std::size_t model = 0;     // index in Suite::models (0: [model])
  std::vector<int> prompts;  // 1-based prompt numbers
  std::string pad_side = "right";
  std::int64_t pad_to = 0;
  std::uint64_t seed = 0;
  // A generation case (model/schedule.h): the rows' last `decode` tokens are decode steps, the
  // prompt before them prefilled in `prefill_chunks` (empty: whole). 0: a prefill case.
  std::int64_t decode = 0;
  std::vector<std::int64_t> prefill_chunks;
};

struct Suite {
  std::string dir;  // the folder holding suite.toml (absolute)
  std::string name, description;
  std::string tokens_file, thresholds_file;  // absolute; thresholds_file "" when none
  int repeat = 2;
  bool replay_selections = true;  // selections = "replay" (default) or "free"
  std::vector<SuiteModel> models;  // [model] first, then every [models.NAME]
  std::vector<SuiteCase> cases;
  std::string hash;  // cache key: SHA-256 (hex) of the definitions and the tdiff version
  const SuiteModel& model_of(const SuiteCase& c) const { return models[c.model]; }
};

// `path`: a suite folder or its suite.toml. InputError naming the file (and line) on any
// unknown key, wrong type or value, missing prompt, duplicate case name, or a case naming no
// [models.NAME]. A [models.NAME] no case names is never built.
Suite load_suite(const std::string& path);

using CiProgress = std::function<void(const std::string& what)>;

// Creates the folder `dir` with its missing parents, one at a time from the top, and returns the
// folders this process made (absolute, top first): a folder is ours only when our mkdir made it,
// so a run that fails removes no folder another run made at the same moment (as an exists()
// check before creating would). On an error, `ec` says why and what was made is removed again.
std::vector<std::filesystem::path> make_folders(const std::filesystem::path& dir, std::error_code& ec);
// Removes the folders make_folders made, the deepest first, each only while it is empty (another
// run may have put its own folder or file in one since).
void remove_empty_folders(const std::vector<std::filesystem::path>& made);

// The cache folder of this suite under `cache_root` (default: <suite>/cache): each model's
// folder (SuiteModel::folder) and <case>.h5 with /reference, each built on first use (all anew
// with `rebuild`) for the `cases` asked for and their models only, each marked done
// (<folder>.done, listing the model's files' sizes; <case>.h5.done) when
// complete, so an interrupted build is redone; a part marked done whose files are missing, of
// another size (the model), or no longer open as a case with its reference is built again;
// COMPLETE once every case of the suite is there. Other keys' folders are removed once this key
// has built something. On an error, what the call created is removed: the key's folder if it
// made it (else the part it was building), then the folders above it that it made, while empty.
struct SuiteCache {
  std::string dir;
  bool built = false;               // false: everything reused
  std::vector<std::string> built_parts;  // what this call built: model folders ("model", "model-NAME"), case names
  double seconds = 0;
  std::string case_file(const SuiteCase& c) const { return dir + "/" + c.name + ".h5"; }
  std::string model_dir(const SuiteModel& m) const { return dir + "/" + m.folder; }
};
SuiteCache prepare_suite_cache(const Suite& suite, std::string cache_root, bool rebuild, const CiProgress& progress,
                               const std::vector<const SuiteCase*>& cases);

// One case of a ci run.
struct CiCaseResult {
  std::string name, case_file, run_id;
  std::int64_t rows = 0, seq = 0;
  std::string pad_side;
  bool padded = false;                    // some row has padding
  std::string schedule;                   // a generation case's schedule (Schedule::describe), else 
  CompareResult diff;                     // judged under the suite's thresholds
  int runs = 1;                           // candidate runs (repeat)
  std::vector<std::string> nondeterministic;  // keys that differed between the runs
  std::string determinism_note;           // the first of them, with its largest difference
  CompareResult determinism;              // the bit-for-bit table (rows only when repeat > 1)
  Verdict verdict = Verdict::pass;        // FAIL: a gated tensor fails, or the runs differ
  std::string reason;                     // why, in one line ("" when PASS)
  double seconds = 0;
  history::SpeedRecord speed;             // with CiOptions::timed
};

struct CiOptions {
  BackendFactory make;  // the candidate, by run seed
  Policy policy = Policy::preset("fixed");
  ThresholdPolicy thresholds;
  bool measured_floor = true;  // judge with the measured floor as `tdiff run` does (exec/measured_floor.h)
  int timed = 0;               // forwards timed after run 1, as `tdiff run --timed` (app/speed.h)
  std::function<void(const Stage&, std::size_t index, int run)> progress;
};

// Runs one case: the candidate against /reference (run 1, seed = case seed) and, when
// suite.repeat > 1, the further runs compared with run 1 bit for bit (replayed: `repeat`
// runs of their own, compared with the first of them).
CiCaseResult run_ci_case(const Suite& suite, const SuiteCase& c, const std::string& case_file, const CiOptions& opt);

// One case judged from an external implementation's dump of it (exec/candidate_dump.h, opened
// on `case_file`), as `tdiff run CASE --candidate-dump DUMP --dump-policy P` judges it:
// `dump_policy` gives the tolerances from precision (null: none, the scaled rule). One dump is
// one run, so there is no determinism gate (runs = 1). Tensors the dump lacks make it WARN, the
// reason counting them and naming the first.
CiCaseResult judge_ci_dump(const SuiteCase& c, const std::string& case_file, const CandidateDump& dump,
                           const Policy* dump_policy, const ThresholdPolicy& thresholds, bool measured_floor = true);

// The logits row of a result ("lm_head/logits"), or null.
const TensorDiff* logits_row(const CompareResult& r);

}  // namespace tdiff
