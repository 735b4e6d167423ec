#pragma once
// Case files (docs/design/design.md §5): one model, fixed inputs, and what runs recorded, in one
// HDF5 file. Layout, format_version 1 (every attribute a UTF-8 string):
//   /                             format_version="1", tdiff_version, tdiff_commit,
//                                 model_config (config.json text), model_path (absolute),
//                                 seed, and "sha256:<file>" and "stat:<file>" for every weight
//                                 file (formats/weight_files.h)
//   /inputs/ids    [B,S] i64      token ids; padding positions hold 0
//   /inputs/mask   [B,S] bool     1 = real token (padding is never implicit)
//   /inputs/pos    [B,S] i64      position from the row's first real token (derived from the
//                                 mask, stored for readers of the file; checked on reading)
//   /inputs                       pad_to, pad_side ("right" or "left"), prompts (one line per
//                                 prompt, ids separated by spaces, as given)
//   /env/<run-id>                 group; attributes: the EnvRecord of that run
//   /reference/<stage>/<tensor>   the refcpu output of every stage
//   /runs/<run-id>/...            a run's captured tensors and metric table
// All writes are atomic (casefile/h5_writer.h H5Writer).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/file_lock.h"
#include "model/batch.h"
#include "model/schedule.h"
#include "model/config.h"
#include "casefile/env_record.h"
#include "casefile/h5io.h"
#include "casefile/stored_tensor.h"
#include "formats/checksum_cache.h"

namespace tdiff {

inline constexpr const char* kCaseFormatVersion = "1";

struct CaseInfo {
  ModelConfig config;
  std::string config_text;  // config.json as read
  std::string model_path;   // absolute
  std::map<std::string, std::string> checksums;  // weight file name -> sha256 (hex)
  // weight file name -> "size=... mtime_ns=... fingerprint=..." (formats/weight_files.h), for the
  // cheap check golden and run make; absent in cases made before it existed.
  std::map<std::string, std::string> file_stats;
  std::uint64_t seed = 0;
  Batch batch;
  std::int64_t pad_to = 0;  // requested --pad-to (0: pad to the longest prompt)
  std::string pad_side = "right";
  std::vector<std::string> prompts;  // one line per row
  // A generation case's schedule (attributes schedule_prompt, schedule_chunks of /inputs;
  // docs/design/generation.md); empty for a prefill case.
  Schedule schedule;
  // Filled by read_case: what wrote the file.
  std::string format_version, tdiff_version, tdiff_commit;
};

// Reads and validates a case: format version, model config (parse_config), inputs
// (Batch::make: ids in the vocabulary, mask 0/1 and contiguous). InputError names the file.
CaseInfo read_case(const std::string& path);
// The same, through a file held open (the case as it was opened, whatever replaced the path since).
CaseInfo read_case(const H5File& file);

// Writes a new case file atomically (replacing `path` if it exists).
void create_case(const std::string& path, const CaseInfo& info);

// Reads `model_dir`/config.json: fills config, config_text and model_path (cheap).
CaseInfo case_for_model(const std::string& model_dir);
// Checks every weight of the model folder against the config (WeightStore: presence, shape,
// dtype, and every value finite: a NaN or Inf weight is an InputError naming the tensor) and
// fills the checksums and file records (reads every byte of the weights: slow for large models).
// The SHA-256 of a file the folder's checksum cache vouches for is taken from it
// (formats/checksum_cache.h) unless o.rehash.
ChecksumReport add_weight_checksums(CaseInfo& c, const ChecksumOptions& o = {});
// The checksums and file records of `files` (paths), replacing those in `c`.
ChecksumReport record_weight_files(CaseInfo& c, const std::vector<std::string>& files, const ChecksumOptions& o = {});

// Prompts as token ids, with where each came from (for error messages).
struct PromptSet {
  std::string source;  // the token file, or "--random-prompts"
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::string> lines;     // the prompt as text (trimmed line of the token file)
  std::vector<std::int64_t> line_no;  // 1-based line in the token file (0 for random prompts)
};

// One prompt per line, ids separated by blanks; blank lines are skipped. A token that is not
// an integer, or is outside 0..vocab_size-1, is an InputError naming the file and line.
PromptSet read_token_file(const std::string& path, std::int64_t vocab_size);
// `n` prompts of `len` ids drawn uniformly from the vocabulary; depends only on the seed
// (std::mt19937_64 with rejection sampling, identical on every platform).
PromptSet random_prompts(std::int64_t n, std::int64_t len, std::int64_t vocab_size, std::uint64_t seed);
// Pads every prompt to max(pad_to, longest) with id 0 and mask 0 on the given side.
// pad_to > 0 and shorter than a prompt is an InputError naming the prompt's line.
Batch pad_prompts(const PromptSet& prompts, std::int64_t pad_to, bool pad_left, std::int64_t vocab_size);

// Stages under /reference, in stage-graph order (names the graph lacks last, sorted).
std::vector<std::string> reference_stages(const std::string& path);
std::vector<std::string> reference_stages(const H5File& file);
// Tensor names of one stage's reference, sorted.
std::vector<std::string> reference_tensors(const std::string& path, const std::string& stage);
std::vector<std::string> reference_tensors(const H5File& file, const std::string& stage);
// One reference tensor, checked against the case's tensor contract (model/tensor_contract.h) as
// a ReferenceStore checks it. Readers of many tensors hold a ReferenceStore (one open file).
Tensor read_reference(const std::string& path, const std::string& stage, const std::string& tensor);
// Environment records by run id, and the run ids under /runs, sorted.
std::map<std::string, EnvRecord> read_env_records(const std::string& path);
std::vector<std::string> case_runs(const std::string& path);

// An atomic update of an existing case file: changes go to a copy that replaces the file on
// commit(); dropping the object without commit() leaves the case untouched. The constructor
// fails (InputError) when the case cannot be updated: a read-only file, a folder that may not
// be written, a full disk.
//
// Updates are serialised: the constructor first takes the case's lock (base/file_lock.h),
// waiting while another command updates it, and commit() lets it go after the rename, so
// the copy an update starts from is never replaced by another update before it lands (two
// recording runs keep both records; a run that records during `golden` keeps golden's
// reference). Commands that compute for long before recording (run, bisect, determinism)
// check with check() at their start and open the update at their end, so they hold the lock
// only while they record; golden, whose update is the new reference, holds it throughout.
class CaseUpdate {
 public:
  // Checks that `path` is a valid case. H5Writer::Copy::bytes for updates that add a record
  // and delete nothing large (run, bisect, determinism): the case's reference is not copied
  // object by object.
  explicit CaseUpdate(const std::string& path, H5Writer::Copy copy = H5Writer::Copy::objects);
  // What the constructor checks, without the lock or the copy: that `path` is a valid case
  // that can be updated now. For commands that open their update at their end.
  static void check(const std::string& path);
  const CaseInfo& info() const { return info_; }
  // The reference this update starts from: the id of the golden run that wrote /reference
  // ("" when none is stored). A command that read the reference earlier compares it with the
  // one it read (reference_id()) before recording a verdict against it.
  const std::string& reference_id() const { return reference_id_; }
  // An InputError unless the reference is still `id_read`: a verdict is recorded only beside
  // the reference it was reached against.
  void require_reference(const std::string& id_read) const;
  void clear_reference();
  void put_reference(const std::string& stage, const std::string& tensor, const Tensor& t);
  void put_conditioning(const std::string& stage, const std::string& tensor, const StoredConditioning& c);
  void put_env(const std::string& run_id, const EnvRecord& env);
  // New "stat:<file>" records (weight file name -> record; formats/weight_files.h).
  void put_file_stats(const std::map<std::string, std::string>& stats);
  // Replaces every weight file record ("sha256:" and "stat:") with those of `c` (golden
  // --force: the new reference belongs to the weights it was computed from).
  void put_weight_records(const CaseInfo& c);
  H5Writer& writer() { return writer_; }  // for /runs/<run-id>/...
  void commit() {
    writer_.commit();
    lock_.release();
  }

 private:
  FileLock lock_;  // first: held before the case is read
  CaseInfo info_;
  std::string reference_id_, writer_path_;
  H5Writer writer_;
};

// The id of the golden run whose reference `path` holds (the "env" attribute of /reference),
// "" when the case has no reference or it predates the attribute.
std::string reference_id(const std::string& path);
// The same through an open file: the reference a command's reads see (casefile/h5_reader.h).
std::string reference_id(const H5File& file);

}  // namespace tdiff
