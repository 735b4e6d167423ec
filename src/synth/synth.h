#pragma once
// Deterministic synthetic DeepSeek-V4 models in the Hugging Face layout (config.json +
// model.safetensors: float32 or bf16 weights, tid2eid as int64), for tests, demos and oracle runs.
// The bytes are a pure function of (config, seed) on every platform: the random numbers use
// only std::mt19937_64 (fully specified by the standard) and integer arithmetic.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "base/tensor.h"
#include "formats/weights.h"
#include "synth/synth_options.h"

namespace tdiff {

// "tiny" (the spec's section 9 model), "small" (6 layers, YaRN on), "v4-flash-dims" (the real
// DeepSeek-V4-Flash dimensions and schedule).
const std::vector<std::string>& synth_preset_names();
// Throws InputError naming the known presets when `name` is not one of them.
ModelConfig synth_preset(const std::string& name);

// Massive activations (--outliers). Real checkpoints carry a few hidden channels with values in
// the hundreds to thousands at a few tokens (the first token, delimiters), nearly constant over
// the layers (Sun et al. 2024, "Massive activations in large language models": ~2600 in
// LLaMA-2-7B; DeepSeek-V2's hidden states overflow fp16, vLLM PR 13232). They are what breaks
// fp16 paths: a single channel above 256 overflows an fp16 sum of squares. The option models
// them in the embedding, which every stream starts from and the residual keeps: for a handful
// of token ids, a handful of fixed channels hold +-M_c with M_c in [100, 1000) per channel
// (fixed sign per channel, +-10% per token id), rounded to bf16 as a real checkpoint stores
// them. Ids and channels depend only on the seed; every other weight is unchanged.
//
// Storage (--dtype): f32 stores every float weight as float32. bf16 stores them as a bf16
// checkpoint does: the weights the release keeps in BF16, FP8 or FP4 (every `*.weight` and the
// routed experts) rounded to bf16 (ties to even), and those it keeps in F32 (the HC
// parameters, sinks, position biases, the routing bias; model-spec §2) as float32. The random
// draws are the same, so a bf16 model is its f32 twin rounded; it is half the bytes, and its
// bf16 weights are exact MMA operands (HIP's fp32 GEMMs of them run on the matrix cores).
// The dtype `name` is stored in under `dtype` (the rule above).
DType synth_storage(const std::string& name, const WeightSpec& spec, DType dtype);
struct SynthOutliers {
  std::vector<std::int64_t> token_ids;  // ascending
  std::vector<std::int64_t> channels;   // ascending
  std::vector<double> magnitude;        // M_c, per channel (signed)
};
// max(2, V/128) token ids and min(4, D/16) channels.
SynthOutliers synth_outliers(const ModelConfig& c, std::uint64_t seed);
// The massive activations of the trained profile (synth_profile.h): max(2, V/16) token ids (a
// few per prompt, as the first token and delimiters carry them), min(2, D/16) channels (two in
// LLaMA2-7B), |M_c| in [500, 1000) (MoE checkpoints peak at 10^2-10^3).
SynthOutliers synth_massive(const ModelConfig& c, std::uint64_t seed);
// What the embedding of a model drawn with `opt` carries: synth_massive under the trained
// profile, synth_outliers with --outliers, none otherwise.
SynthOutliers synth_embedding_outliers(const ModelConfig& c, std::uint64_t seed, const SynthOptions& opt);
// A 64-bit hash of (seed, name): the seed of name's random stream, for draws made per head.
std::uint64_t synth_hash(std::uint64_t seed, const std::string& name);

// The initial value of one parameter `name` (HF naming, as expected_weights(c) gives it), in
// its storage dtype (synth_storage).
Tensor synth_weight(const ModelConfig& c, const std::string& name, const WeightSpec& spec, std::uint64_t seed,
                    const SynthOptions& opt = {});

// Float tensors above this many elements are drawn in independent blocks of this size (block b
// from its own random stream), so a writer can generate any block alone, on any core.
inline constexpr std::int64_t kSynthBlock = std::int64_t{1} << 24;

// Elements [begin, begin + count) of float parameter `name` as the float32 model (--dtype f32)
// holds them, generating only the blocks that contain them (the whole prefix for an unblocked
// tensor). The release writer quantises these values.
std::vector<float> synth_values(const ModelConfig& c, const std::string& name, const WeightSpec& spec,
                                std::uint64_t seed, const SynthOptions& opt, std::int64_t begin, std::int64_t count);

// Bytes written so far and in all, for progress display.
using SynthProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Writes dir/config.json and dir/model.safetensors with every weight of expected_weights(c).
// Atomic: the files are written into a temporary folder beside `dir` that is then renamed to
// `dir` (an existing `dir` holding only model files is replaced); on any error nothing is
// left behind. Weights are generated in chunks, so memory use does not grow with the model.
// Throws InputError (not writable, `dir` is a file, `dir` holds other files).
void write_synth_model(const ModelConfig& c, std::uint64_t seed, const std::string& dir,
                       const SynthProgress& progress = {}, const SynthOptions& opt = {});

// The folder swap behind write_synth_model: `write` fills a temporary folder beside `dir`,
// which then becomes `dir` (replacing a `dir` that holds only model files); on any error
// nothing is left behind.
void write_model_folder(const std::string& dir, const std::function<void(const std::string& tmp_dir)>& write);
// A whole text file (InputError naming it when it cannot be written).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace tdiff
