// tdiff synth: a deterministic synthetic model folder (HF or release layout) from a preset or a config.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/command.h"
#include "model/config.h"
#include "base/error.h"
#include "synth/synth.h"
#include "synth/synth_profile.h"
#include "synth/synth_release.h"
#include "formats/weights.h"

namespace tdiff::cli {
namespace {

struct SynthOptions {
  std::string preset;
  std::string config;
  std::string layers;
  std::uint64_t seed = 0;
  bool outliers = false;
  std::string profile = "default";
  std::string dtype = "f32";
  bool dtype_given = false;
  std::string format = "hf";
  double shard_gb = 4.0;
  std::string out;
};

void run_synth(const SynthOptions& o) {
  if (o.preset.empty() == o.config.empty()) input_error("synth: give exactly one of --preset and --config");
  ModelConfig c = o.preset.empty() ? load_config(o.config) : synth_preset(o.preset);
  if (!o.layers.empty()) c.select_layers(o.layers);
  const bool release = o.format == "release";
  if (release && o.dtype_given)
    input_error("synth: --dtype applies to --format hf (the release layout stores FP8, FP4, BF16 and F32 as DeepSeek does)");
  const SynthProfile profile = parse_synth_profile(o.profile);
  if (profile == SynthProfile::trained && o.outliers)
    input_error("synth: --outliers is part of --profile trained (its massive activations); give one of them");
  if (!(o.shard_gb > 0) || o.shard_gb > 1e6) input_error("synth: --shard-gb {} is not a positive size", o.shard_gb);

  std::uint64_t params = 0;
  for (const auto& [name, spec] : expected_weights(c)) params += static_cast<std::uint64_t>(shape_numel(spec.shape));
  // Progress only for models that take a while to write, and only on a terminal.
  const bool show = params > (std::uint64_t{1} << 28) && ::isatty(STDERR_FILENO);
  int last_pct = -1;
  const SynthProgress progress = [&](std::uint64_t done, std::uint64_t total) {
    const int pct = static_cast<int>(100 * done / std::max<std::uint64_t>(total, 1));
    if (!show || pct == last_pct) return;
    last_pct = pct;
    fmt::print(stderr, "\rsynth: {:3d}% of {:.1f} GB", pct, static_cast<double>(total) / 1e9);
    if (done == total) fmt::print(stderr, "\n");
  };
  ReleaseWriteTimes times;
  if (release) {
    ReleaseOptions ro;
    ro.outliers = o.outliers;
    ro.profile = profile;
    ro.shard_bytes = static_cast<std::uint64_t>(o.shard_gb * 1e9);
    times = write_release_model(c, o.seed, o.out, progress, ro);
  } else {
    tdiff::SynthOptions so;
    so.outliers = o.outliers;
    so.profile = profile;
    so.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
    write_synth_model(c, o.seed, o.out, progress, so);
  }
  fmt::print("wrote {} ({} layers, {} parameters, {}, seed {}{})\n", o.out, c.num_hidden_layers, params,
             release ? "release layout: FP8 linears, FP4 experts" : o.dtype + " weights", o.seed,
             profile == SynthProfile::trained ? ", trained profile" : "");
  if (release)
    fmt::print("time: drawn, quantised and written {:.1f} s, then flushed to disk {:.1f} s\n", times.write_s,
               times.flush_s);
  const SynthOutliers out = synth_embedding_outliers(c, o.seed, tdiff::SynthOptions{o.outliers, DType::f32, profile});
  if (!out.token_ids.empty()) {
    std::vector<std::string> mags;
    for (double m : out.magnitude) mags.push_back(fmt::format("{:+.0f}", m));
    // The ids go into prompts; a real vocabulary's V/16 are thousands, so the first 32 stand for them.
    const std::size_t shown = std::min<std::size_t>(out.token_ids.size(), 32);
    const std::vector<std::int64_t> ids(out.token_ids.begin(), out.token_ids.begin() + static_cast<std::ptrdiff_t>(shown));
    fmt::print("outliers: token ids {}{} carry massive activations in channels {} (about {})\n", fmt::join(ids, " "),
               shown < out.token_ids.size() ? fmt::format(" ... ({} ids in all)", out.token_ids.size()) : "",
               fmt::join(out.channels, " "), fmt::join(mags, " "));
  }
}

}  // namespace

void setup_synth(CLI::App& app) {
  auto opt = std::make_shared<SynthOptions>();
  CLI::App* sub = app.add_subcommand(
      "synth", "Write a deterministic synthetic DeepSeek-V4 model folder (config.json + model.safetensors)");
  CLI::Option* preset = sub->add_option("--preset", opt->preset, "tiny | small | v4-flash-dims | v4-flash-narrow (the 43 layers at real attention widths, "
                                        "16 experts of width 256: about 16 GB as bf16)");
  CLI::Option* config = sub->add_option("--config", opt->config, "take the dimensions from a deepseek_v4 config.json");
  preset->excludes(config);
  sub->add_option("--layers", opt->layers,
                  "K: the first K layers; or layers of the schedule, e.g. 0-3 (v4-flash-dims: sliding, sliding, CSA, "
                  "HCA) or 2,3, renumbered from 0");
  sub->add_option("--seed", opt->seed, "random seed; the same seed gives the same bytes")->required();
  sub->add_flag("--outliers", opt->outliers,
                "massive activations: a few token ids carry values of 100-1000 in a few fixed channels, as real "
                "checkpoints do (docs/guide/synthetic-models.md)");
  sub->add_option("--profile", opt->profile,
                  "default: weights drawn like an initialised model, scaled so activations are O(1); trained: the "
                  "statistics of trained LLMs (sharp heads with logits of tens, attention sinks, massive activations, "
                  "near-tied routers; docs/guide/synthetic-models.md)")
      ->check(CLI::IsMember(synth_profile_names()))
      ->capture_default_str();
  sub->add_option("--dtype", opt->dtype,
                  "f32: every weight float32; bf16: as a bf16 checkpoint, the weights the release keeps in "
                  "BF16/FP8/FP4 rounded to bf16, the HC parameters, sinks and biases float32 (half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->each([opt](const std::string&) { opt->dtype_given = true; });
  sub->add_option("--format", opt->format,
                  "hf: the transformers layout; release: DeepSeek's release layout (release tensor names, FP8 E4M3 "
                  "linears with 128x128 E8M0 scales, FP4 E2M1 routed experts with per-32 scales, shards and "
                  "model.safetensors.index.json, a release config.json)")
      ->check(CLI::IsMember({"hf", "release"}))
      ->capture_default_str();
  sub->add_option("--shard-gb", opt->shard_gb, "release: start a new shard once one holds this many GB")->capture_default_str();
  sub->add_option("-o,--out", opt->out, "output folder (created, or replaced if it holds only a model)")->required();
  sub->footer(
      "The weights are float32 or bf16 (--dtype; tid2eid int64), named as transformers' DeepseekV4ForCausalLM expects.\n"
      "Examples:\n"
      "  tdiff synth --preset tiny --seed 1 -o models/tiny\n"
      "  tdiff synth --preset tiny --outliers --seed 1 -o models/tiny-outliers   (ids and channels printed)\n"
      "  tdiff synth --preset small --profile trained --seed 1 -o models/small-trained   (then tdiff stats on a case)\n"
      "  tdiff synth --preset v4-flash-dims --layers 1 --seed 7 -o models/flash1   (about 27 GB a layer)\n"
      "  tdiff synth --preset v4-flash-dims --layers 2 --dtype bf16 --seed 7 -o models/flash2   (about 13 GB a layer)\n"
      "  tdiff synth --config path/to/config.json --seed 3 -o models/custom\n"
      "  tdiff synth --preset tiny --format release --seed 1 -o models/tiny-release\n"
      "  tdiff synth --preset v4-flash-dims --layers 0-3 --format release --seed 1 -o models/flash4   (every layer type)\n");
  sub->callback([opt] { run_synth(*opt); });
}

}  // namespace tdiff::cli
