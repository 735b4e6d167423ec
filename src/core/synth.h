#pragma once
// Deterministic synthetic DeepSeek-V4 models in the Hugging Face layout (config.json +
// model.safetensors, float32 weights, tid2eid as int64), for tests, demos and oracle runs.
// The bytes are a pure function of (config, seed) on every platform: the random numbers use
// only std::mt19937_64 (fully specified by the standard) and integer arithmetic.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/tensor.h"
#include "core/weights.h"

namespace tdiff {

// "tiny" (the spec's section 9 model), "small" (6 layers, YaRN on), "v4-flash-dims" (the real
// DeepSeek-V4-Flash dimensions and schedule).
const std::vector<std::string>& synth_preset_names();
// Throws InputError naming the known presets when `name` is not one of them.
ModelConfig synth_preset(const std::string& name);

// The initial value of one parameter `name` (HF naming, as expected_weights(c) gives it):
// float32, or int64 for tid2eid.
Tensor synth_weight(const ModelConfig& c, const std::string& name, const WeightSpec& spec, std::uint64_t seed);

// Bytes written so far and in all, for progress display.
using SynthProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Writes dir/config.json and dir/model.safetensors with every weight of expected_weights(c).
// Atomic: the files are written into a temporary folder beside `dir` that is then renamed to
// `dir` (an existing `dir` holding only model files is replaced); on any error nothing is
// left behind. Weights are generated in chunks, so memory use does not grow with the model.
// Throws InputError (not writable, `dir` is a file, `dir` holds other files).
void write_synth_model(const ModelConfig& c, std::uint64_t seed, const std::string& dir,
                       const SynthProgress& progress = {});

}  // namespace tdiff
