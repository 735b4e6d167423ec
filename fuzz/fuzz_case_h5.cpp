// A case file through everything that reads one: the input is written to a .h5 file and read
// as `info`, `run` and `stats` read cases (app::info_case; app::run_run with the case's own
// reference as the candidate dump; compute_model_stats), then as the library's readers do:
// read_case, the reference stages and their tensors' names, the environment records and runs,
// and every dataset of the file as `compare` lists and reads them.
// Twice when the input carries tdiff's integrity record (docs/reference/case-file-format.md):
// as it is, where the check rejects nearly every mutation (the record's parser and the check
// are what is fuzzed), then with the record written anew for the mutated bytes, as
// `tdiff case seal` would, so that the same bytes reach the HDF5 read path behind the check.
// Inputs without the record (cases written before it existed, other tools' files) are read
// unchecked, as tdiff reads them.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "app/info_command.h"
#include "app/run_command.h"
#include "base/file_seal.h"
#include "casefile/case_file.h"
#include "casefile/h5_common.h"
#include "casefile/h5io.h"
#include "casefile/session.h"
#include "checks/model_stats.h"
#include "fuzz/fuzz_common.h"
#include "synth/synth.h"

namespace {

using namespace tdiff;

// The tiny model every seed was made from (synth is deterministic: the case's weight records match).
const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = (fuzz::scratch_dir() / "model").string();
    write_synth_model(synth_preset("tiny"), 1, d);
    return d;
  }();
  return dir;
}

void read_as_commands(const std::string& path, std::uint64_t& sum) {
  fuzz::expect_input_errors([&] {
    app::InfoOptions o;
    o.case_path = path;
    app::info_case(o);
  });
  fuzz::expect_input_errors([&] {
    app::RunCmd c;
    c.case_path = path;
    // The candidate is the case's own reference read as a dump (run --candidate-dump c.h5
    // --dump-group /reference): every read of a run without the forward pass, which would take
    // seconds per input under ASan and reads nothing more of the case.
    c.dump = path;
    c.dump_group = "/reference";
    c.cand.model_dir = model_dir();
    c.report.no_reports = true;
    c.history.no_record = true;  // nothing recorded beside the input
    sum += static_cast<std::uint64_t>(app::run_run(c));
  });
  fuzz::expect_input_errors([&] {
    CaseSession s = open_session(path, model_dir());
    sum += compute_model_stats(s).layers.size();
  });
}

void read_as_library(const std::string& path, std::uint64_t& sum) {
  fuzz::expect_input_errors([&] {
    const CaseInfo c = read_case(path);
    sum += static_cast<std::uint64_t>(c.batch.ids.numel()) + c.checksums.size();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& stage : reference_stages(path)) sum += reference_tensors(path, stage).size();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& [id, env] : read_env_records(path)) sum += id.size();
    sum += case_runs(path).size();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& name : h5_list_datasets(path, "/")) sum += h5_read(path, name).nbytes();
  });
}

void read_all(const std::string& path, std::uint64_t& sum) {
  h5::forget_checked_files();  // one path rewritten for every input
  read_as_commands(path, sum);
  read_as_library(path, sum);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One thread: scripts/fuzz runs two targets at a time on two cores, and OpenMP's spinning
  // workers made an input ten times slower there.
  ::setenv("OMP_NUM_THREADS", "1", 0);
  // info and run print their tables; libFuzzer reports on stderr.
  if (!std::freopen("/dev/null", "w", stdout)) return 1;
  model_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("case.h5", fuzz::as_text(data, size));
  std::uint64_t sum = 0;
  read_all(path, sum);
  // A record that matched let the first pass through: sealing again would change nothing.
  std::optional<SealCheck> check;
  fuzz::expect_input_errors([&] { check = check_seal(path, true); });
  if (check && !check->damage.empty() && size > kSealBlock) {
    write_seal(path, kSealBlock, path);
    read_all(path, sum);
  }
  fuzz::sink = sum;
  return 0;
}
