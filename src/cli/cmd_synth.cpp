// tdiff synth: a deterministic synthetic model folder (HF layout) from a preset or a config.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/command.h"
#include "core/config.h"
#include "core/error.h"
#include "core/synth.h"
#include "core/weights.h"

namespace tdiff::cli {
namespace {

struct SynthOptions {
  std::string preset;
  std::string config;
  std::int64_t layers = 0;
  bool layers_given = false;
  std::uint64_t seed = 0;
  bool outliers = false;
  std::string dtype = "f32";
  std::string out;
};

void run_synth(const SynthOptions& o) {
  if (o.preset.empty() == o.config.empty()) input_error("synth: give exactly one of --preset and --config");
  ModelConfig c = o.preset.empty() ? load_config(o.config) : synth_preset(o.preset);
  if (o.layers_given) c.truncate_layers(o.layers);

  std::uint64_t params = 0;
  for (const auto& [name, spec] : expected_weights(c)) params += static_cast<std::uint64_t>(shape_numel(spec.shape));
  // Progress only for models that take a while to write, and only on a terminal.
  const bool show = params > (std::uint64_t{1} << 28) && ::isatty(STDERR_FILENO);
  int last_pct = -1;
  tdiff::SynthOptions so;
  so.outliers = o.outliers;
  so.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  write_synth_model(
      c, o.seed, o.out,
      [&](std::uint64_t done, std::uint64_t total) {
        const int pct = static_cast<int>(100 * done / std::max<std::uint64_t>(total, 1));
        if (!show || pct == last_pct) return;
        last_pct = pct;
        fmt::print(stderr, "\rsynth: {:3d}% of {:.1f} GB", pct, static_cast<double>(total) / 1e9);
        if (done == total) fmt::print(stderr, "\n");
      },
      so);
  fmt::print("wrote {} ({} layers, {} parameters, {} weights, seed {})\n", o.out, c.num_hidden_layers, params, o.dtype,
             o.seed);
  if (o.outliers) {
    const SynthOutliers out = synth_outliers(c, o.seed);
    std::vector<std::string> mags;
    for (double m : out.magnitude) mags.push_back(fmt::format("{:+.0f}", m));
    fmt::print("outliers: token ids {} carry massive activations in channels {} (about {})\n", fmt::join(out.token_ids, " "),
               fmt::join(out.channels, " "), fmt::join(mags, " "));
  }
}

}  // namespace

void setup_synth(CLI::App& app) {
  auto opt = std::make_shared<SynthOptions>();
  CLI::App* sub = app.add_subcommand(
      "synth", "Write a deterministic synthetic DeepSeek-V4 model folder (config.json + model.safetensors)");
  CLI::Option* preset = sub->add_option("--preset", opt->preset, "tiny | small | v4-flash-dims");
  CLI::Option* config = sub->add_option("--config", opt->config, "take the dimensions from a deepseek_v4 config.json");
  preset->excludes(config);
  CLI::Option* layers = sub->add_option("--layers", opt->layers, "keep only the first K layers");
  sub->add_option("--seed", opt->seed, "random seed; the same seed gives the same bytes")->required();
  sub->add_flag("--outliers", opt->outliers,
                "massive activations: a few token ids carry values of 100-1000 in a few fixed channels, as real "
                "checkpoints do (README: tdiff synth)");
  sub->add_option("--dtype", opt->dtype,
                  "f32: every weight float32; bf16: as a bf16 checkpoint, the weights the release keeps in "
                  "BF16/FP8/FP4 rounded to bf16, the HC parameters, sinks and biases float32 (half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  sub->add_option("-o,--out", opt->out, "output folder (created, or replaced if it holds only a model)")->required();
  sub->footer(
      "The weights are float32 or bf16 (--dtype; tid2eid int64), named as transformers' DeepseekV4ForCausalLM expects.\n"
      "Examples:\n"
      "  tdiff synth --preset tiny --seed 1 -o models/tiny\n"
      "  tdiff synth --preset tiny --outliers --seed 1 -o models/tiny-outliers   (ids and channels printed)\n"
      "  tdiff synth --preset v4-flash-dims --layers 1 --seed 7 -o models/flash1   (about 27 GB a layer)\n"
      "  tdiff synth --preset v4-flash-dims --layers 2 --dtype bf16 --seed 7 -o models/flash2   (about 13 GB a layer)\n"
      "  tdiff synth --config path/to/config.json --seed 3 -o models/custom\n");
  sub->callback([opt, layers] {
    opt->layers_given = layers->count() > 0;
    run_synth(*opt);
  });
}

}  // namespace tdiff::cli
