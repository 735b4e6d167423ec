// A case file through the HDF5 reader: the input is written to a .h5 file and read as
// `info`, `golden`, `run` and `compare` read cases: read_case (attributes, config, inputs),
// the reference stages and tensors, the environment records and runs, then every dataset of
// the file as `compare` lists and reads them.
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string path = fuzz::write_file("case.h5", fuzz::as_text(data, size));
  std::uint64_t sum = 0;
  fuzz::expect_input_errors([&] {
    const CaseInfo c = read_case(path);
    sum += static_cast<std::uint64_t>(c.batch.ids.numel()) + c.checksums.size();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& stage : reference_stages(path))
      for (const auto& tensor : reference_tensors(path, stage)) sum += read_reference(path, stage, tensor).nbytes();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& [id, env] : read_env_records(path)) sum += id.size();
    sum += case_runs(path).size();
  });
  fuzz::expect_input_errors([&] {
    for (const auto& name : h5_list_datasets(path, "/")) sum += h5_read(path, name).nbytes();
  });
  fuzz::sink = sum;
  return 0;
}
