// model.safetensors.index.json through ModelWeights: the fuzz input is the index; the folder
// also holds two valid shards (shard-a.safetensors: tensors a, b; shard-b.safetensors: c), so
// inputs that name them reach the cross-checks between the index and the shards.
#include <filesystem>

#include "formats/safetensors.h"
#include "fuzz/fuzz_common.h"

namespace {

const std::string& model_dir() {
  static const std::string dir = [] {
    using namespace tdiff;
    const auto d = fuzz::scratch_dir() / "index-model";
    std::filesystem::create_directories(d);
    Tensor a(DType::f32, {2, 3}), b(DType::i64, {4}), c(DType::bf16, {1, 1});
    write_safetensors((d / "shard-a.safetensors").string(), {{"a", a}, {"b", b}});
    write_safetensors((d / "shard-b.safetensors").string(), {{"c", c}});
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  const std::string dir = model_dir();
  // Written in place (std::filesystem::copy_file gives up on EINTR from libFuzzer's timer signal).
  fuzz::write_file("index-model/model.safetensors.index.json", fuzz::as_text(data, size));
  fuzz::expect_input_errors([&] {
    ModelWeights w(dir);
    std::uint64_t sum = w.files().size();
    for (const auto& name : w.names()) sum += w.tensor(name).nbytes() + w.info(name).end;
    fuzz::sink = sum;
  });
  return 0;
}
