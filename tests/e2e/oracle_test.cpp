// refcpu against transformers: the dumps in tests/support/oracle/ were written by
// python/capture_hf.py (transformers 5.17, float64, eager) on the device machine from the
// tiny synthetic model (tdiff synth --preset tiny --seed 1) and the case files beside them.
// Every captured stage is compared on real tokens only; the spec's acceptance bound is a
// relative L2 error <= 1e-6 per token on every layer output and on the logits (section 3.10).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "backend/executor.h"
#include "casefile/h5io.h"
#include "casefile/session.h"
#include "synth/synth.h"
#include "diff/real_rows.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

struct StageError {
  double worst_rel = 0;  // max over real tokens of |ref - hf| / |hf| (L2 over the token's values)
  std::int64_t int_mismatches = 0, compared = 0;
};

// `case_file` and `hf_file` from the same model: preset `preset` cut to `layers` (0: all), seed 1.
std::map<std::string, StageError> compare_with_hf(const std::string& case_file, const std::string& hf_file,
                                                  const std::string& preset, std::int64_t layers) {
  const fs::path model = fs::temp_directory_path() / fmt::format("tdiff-oracle-{}-{}", preset, ::getpid());
  fs::remove_all(model);
  ModelConfig config = synth_preset(preset);
  if (layers > 0) config.truncate_layers(layers);
  write_synth_model(config, 1, model.string());
  CaseSession session = open_session(case_file, model.string());
  RunContext ctx = session.context(TieRule::torch_cpu);
  refcpu::RefCpuBackend ref;
  TensorMap env;
  put_inputs(session.info.batch, env);
  execute(session.stages, [&](const Stage&) -> Backend& { return ref; }, ctx, env, {}, /*keep_all=*/true);
  fs::remove_all(model);

  std::map<std::string, std::int64_t> rate_of;
  for (const auto& s : session.stages) rate_of[s.name] = session.info.config.rate(s.layer_type);
  std::map<std::string, StageError> errors;
  for (const std::string& path : h5_list_datasets(hf_file, "/")) {
    const std::string key = path.substr(1);  // "<stage>/<tensor>"
    if (!env.count(key)) continue;           // extras (idx_sorted, wt_sorted)
    const Tensor& ours = env.at(key);
    const Tensor hf = h5_read(hf_file, path);
    EXPECT_EQ(ours.shape(), hf.shape()) << key;
    if (ours.shape() != hf.shape()) continue;
    const std::string stage = key.substr(0, key.find('/'));
    const RealRows rows = real_rows(ours, session.info.batch, rate_of[stage]);
    StageError& e = errors[key];
    for (std::int64_t r = 0; r < rows.rows; ++r) {
      if (!rows.real[static_cast<std::size_t>(r)]) continue;
      double diff = 0, norm = 0;
      for (std::int64_t c = 0; c < rows.row_size; ++c) {
        const auto i = r * rows.row_size + c;
        const double a = ours.value(i), b = hf.value(i);
        if (!is_float(ours.dtype())) {
          e.int_mismatches += a != b;
          continue;
        }
        if (std::isinf(a) || std::isinf(b)) {  // −∞ scores of non-causal entries
          e.int_mismatches += a != b;
          continue;
        }
        diff += (a - b) * (a - b);
        norm += b * b;
      }
      ++e.compared;
      if (norm > 0) e.worst_rel = std::max(e.worst_rel, std::sqrt(diff / norm));
      else if (diff > 0) e.worst_rel = INFINITY;
    }
  }
  return errors;
}

void check(const std::string& name, const std::string& case_file, const std::string& hf_file,
           const std::string& preset = "tiny", std::int64_t layers = 0, std::size_t min_tensors = 150) {
  auto errors = compare_with_hf(case_file, hf_file, preset, layers);
  ASSERT_GE(errors.size(), min_tensors) << "too few stages captured";
  fmt::print("{:<32} {:>14}  (worst per-token relative L2 against transformers, real tokens)\n", name, "rel L2");
  for (const auto& [key, e] : errors) {
    fmt::print("{:<32} {:>14.3e}{}\n", key, e.worst_rel, e.int_mismatches ? fmt::format("  {} mismatches", e.int_mismatches) : "");
    EXPECT_EQ(e.int_mismatches, 0) << key;
    const bool layer_output = key.ends_with("hc_ffn.post/X") || key == "lm_head/logits";
    // Layer outputs and logits: the spec's acceptance bound. The indexer scores are float32
    // in HF (F6) and sum heads of both signs, so cancellation magnifies their relative error;
    // what matters there is the selection, compared exactly (idx.topk). Every other stage:
    // the bound with a margin for the values HF computes in float32.
    const double bound = layer_output ? 1e-6 : key.ends_with("idx.score/score") ? 1e-4 : 1e-5;
    EXPECT_LE(e.worst_rel, bound) << key;
  }
}

const std::string kDir = std::string(TDIFF_SOURCE_DIR) + "/tests/support/oracle/";

// Two prompts of 40 and 24 tokens, right padding (transformers is only right there).
TEST(OracleTransformers, TinyPaddedBatchMatchesTransformers) {
  check("tiny-pad", kDir + "tiny-pad.case.h5", kDir + "tiny-pad.hf.h5");
}
// 96 tokens: 12 sliding windows, 24 CSA and 12 HCA entries, the indexer selecting.
TEST(OracleTransformers, TinyLongSequenceMatchesTransformers) {
  check("tiny-long", kDir + "tiny-long.case.h5", kDir + "tiny-long.hf.h5");
}
// The small preset (YaRN on the compress table) is too large a dump to ship; with the files
// of tests/support/oracle/README.md at hand, TDIFF_ORACLE_SMALL=DIR runs the same comparison.
TEST(OracleTransformers, SmallYarnSequenceMatchesTransformers) {
  const char* dir = std::getenv("TDIFF_ORACLE_SMALL");
  if (!dir) GTEST_SKIP() << "set TDIFF_ORACLE_SMALL to the folder holding small-long.h5 and hf-small-long.h5";
  check("small-long", std::string(dir) + "/small-long.h5", std::string(dir) + "/hf-small-long.h5", "small", 4, 30);
}

}  // namespace
}  // namespace tdiff
