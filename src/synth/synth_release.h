#pragma once
// Synthetic models in DeepSeek's release layout (`tdiff synth --format release`): the float32
// synthetic model (synth/synth.h) quantised as the release stores it (formats/release_format.h):
// FP8 E4M3 linears with power-of-two 128 x 128 block scales, FP4 E2M1 routed experts with
// power-of-two per-32 scales, the other BF16 tensors rounded to bf16, the F32 ones as they are;
// release tensor names; shards of at most `shard_bytes` listed by model.safetensors.index.json;
// and a release-style config.json (legacy keys: compress_ratios with an MTP entry,
// num_hash_layers, qk_rope_head_dim, rope_scaling; quantization_config). Every test and
// benchmark of the release path runs on these instead of the real weights.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "synth/synth.h"

namespace tdiff {

struct ReleaseOptions {
  bool outliers = false;
  SynthProfile profile = SynthProfile::standard;
  std::uint64_t shard_bytes = std::uint64_t{4} << 30;  // a shard closes once it holds this much
};

// The release's config.json for `c`; InputError when the release format cannot express `c`
// (hash-routed layers that are not the first ones).
nlohmann::json release_config_json(const ModelConfig& c);

// Where a release synth's time went: drawing, quantising and writing the shards (all threads),
// then the fsync that waits for what is still on its way to the disk (all shards at once).
struct ReleaseWriteTimes {
  double write_s = 0, flush_s = 0;
};

// Writes dir/config.json, dir/model-0000k-of-0000n.safetensors and
// dir/model.safetensors.index.json, atomically (as write_synth_model). Same seed, same bytes.
ReleaseWriteTimes write_release_model(const ModelConfig& c, std::uint64_t seed, const std::string& dir,
                                      const SynthProgress& progress = {}, const ReleaseOptions& opt = {});

}  // namespace tdiff
