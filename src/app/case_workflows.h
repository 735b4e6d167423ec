#pragma once
// The two workflows every command, the golden sets and the tests share to make a case: the case
// file itself (a model folder and prompts) and its float64 reference. One implementation, so a
// case made by `tdiff case new` + `tdiff golden`, by `tdiff ci` and by a test holds the same.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/case_file.h"
#include "casefile/session.h"
#include "exec/conditioning.h"

namespace tdiff::app {

struct CaseRequest {
  std::string model_dir;
  PromptSet prompts;
  std::int64_t pad_to = 0;  // 0: the longest prompt
  bool pad_left = false;
  std::uint64_t seed = 0;   // recorded: where the prompts came from
  bool replace = false;     // an existing file at `out` is replaced (case new --force; ci's own cache)
  bool rehash = false;      // hash every weight file whole, whatever the folder's checksum cache says (case new --rehash)
  // A generation case (docs/design/generation.md): the last `decode` tokens of every row are
  // decode steps, the prompt before them prefilled in `chunks` (empty: whole). 0: a prefill case.
  std::int64_t decode = 0;
  std::vector<std::int64_t> chunks;
  // A generation case whose `generate` decoded tokens the float64 reference chooses greedily,
  // in steps against its cache (exec/greedy.h), after the prompt (prefilled in `chunks`).
  // Excludes `decode`. `on_token` is told each token as it is chosen.
  std::int64_t generate = 0;
  std::function<void(std::int64_t done, std::int64_t total)> on_token;
};

// A case file written over an existing one takes its reference and recorded runs with it (a
// 7 MB case became 5 KB): InputError naming `out` when something is there, unless `replace`.
void check_case_target(const std::string& out, bool replace);

// Writes the case file `out` (the model's config and weight checksums, the padded inputs) and
// returns what it holds. Prompts are checked against the model's vocabulary (InputError); an
// existing `out` is refused unless request.replace (check_case_target). `checksums`, when given,
// is told how the weights' checksums were found (hashed, or from the folder's checksum cache).
CaseInfo make_case(const CaseRequest& request, const std::string& out, ChecksumReport* checksums = nullptr);

// `tdiff case seal`: records the current checksum of a case edited outside tdiff (h5py, HDF5
// tools), after checking that it still reads as a case: read_case, its groups listed, its
// environment records and reference stages. The new record is written into a copy that replaces
// the file (a file without a user block, made before the record existed, is rewritten with one).
struct Sealed {
  std::string was;      // what the old record said: "" matched, "unsealed", or the damage
  std::uint64_t bytes = 0;
};
Sealed seal_case(const std::string& path);

struct ReferenceRequest {
  std::string stages;                       // store only these (globs; empty: every stage)
  // Store the layer boundaries (casefile/reference_layers.h boundary_stages) and `stages`: the
  // layers' other stages are recomputed when read. /reference is written whole.
  bool boundaries = false;
  // With `stages`: the stored stages they do not match stay as they are (false: /reference
  // holds these stages only, golden --force over a reference of another tie rule or weights).
  bool keep_others = true;
  TieRule tie_rule = TieRule::lowest_index;
  // Probes of each stage's conditioning stored beside it (exec/conditioning.h; 0: none, and the
  // tolerance model then takes every stage as well conditioned).
  int conditioning_probes = kConditioningProbes;
  std::function<void(std::size_t index, const Stage&)> progress;
  std::string weights_note;                 // the weight check's note for the record ("" none)
  // Called on the update before it is committed (tdiff golden --force records the new weights).
  std::function<void(CaseUpdate&)> before_commit;
};

struct ReferenceWritten {
  std::size_t stages = 0, tensors = 0;
  std::size_t stored_stages = 0;  // stages whose outputs were stored
  std::string store;              // the /reference attribute "store" (kStoreAll, kStoreBoundaries, kStoreStages)
  std::size_t kept = 0;  // stored stages left as they were (ReferenceRequest::keep_others)
  double seconds = 0;  // computing the stages
  double conditioning_seconds = 0;  // of which probing their conditioning
  std::size_t conditioned = 0;      // float outputs with a conditioning stored
  std::string run_id;  // of the reference's environment record
};

// Runs every stage on refcpu and stores the chosen ones under /reference of the session's case
// (replacing those stages, and the others unless keep_others), with the reference's
// environment record.
ReferenceWritten write_reference(CaseSession& session, const ReferenceRequest& request);

}  // namespace tdiff::app
