// A token file (one prompt per line, ids separated by blanks) through read_token_file, then
// padded into a batch as `case new` does. The first byte picks the vocabulary size (bits 0-1:
// 1, 256, the real 129280, or 2^62) and the padding side (bit 2); the second, --pad-to.
#include "casefile/case_file.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tdiff;
  if (size < 2) return 0;
  constexpr std::int64_t kVocab[] = {1, 256, 129280, std::int64_t{1} << 62};
  const std::int64_t vocab = kVocab[data[0] & 3];
  const bool pad_left = (data[0] & 4) != 0;
  const std::int64_t pad_to = data[1];
  const std::string path = fuzz::write_file("tokens.txt", fuzz::as_text(data + 2, size - 2));
  fuzz::expect_input_errors([&] {
    const PromptSet p = read_token_file(path, vocab);
    const Batch b = pad_prompts(p, pad_to, pad_left, vocab);
    fuzz::sink = static_cast<std::uint64_t>(b.ids.numel());
  });
  return 0;
}
