#pragma once
// Test helper: a synthetic model, a case with fixed prompts and its float64 reference, built
// through the library exactly as `tdiff synth`, `tdiff case new` and `tdiff golden` build them.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "app/case_workflows.h"
#include "casefile/case_file.h"
#include "backend/executor.h"
#include "casefile/session.h"
#include "synth/synth.h"
#include "synth/synth_release.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff::testing {

// Writes dir/model (the synthetic model; with `release`, in DeepSeek's release layout: FP8
// linears, FP4 experts) and dir/case.h5 with `prompts` padded to `pad_to`, and the reference
// of every stage; returns the case path.
inline std::string build_golden_case(const std::filesystem::path& dir, const ModelConfig& config,
                                     std::uint64_t model_seed, const std::vector<std::vector<std::int64_t>>& prompts,
                                     std::int64_t pad_to, bool pad_left = false, const SynthOptions& synth = {},
                                     bool release = false) {
  const std::string model = (dir / "model").string(), path = (dir / "case.h5").string();
  if (release) {
    ReleaseOptions opt;
    opt.outliers = synth.outliers, opt.profile = synth.profile;
    write_release_model(config, model_seed, model, {}, opt);
  } else {
    write_synth_model(config, model_seed, model, {}, synth);
  }
  app::CaseRequest request;
  request.model_dir = model;
  request.prompts.source = "test";
  for (const auto& ids : prompts) {
    request.prompts.ids.push_back(ids);
    std::string line;
    for (auto id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    request.prompts.lines.push_back(line);
    request.prompts.line_no.push_back(0);
  }
  request.pad_to = pad_to;
  request.pad_left = pad_left;
  request.seed = model_seed;
  app::make_case(request, path);
  CaseSession session = open_session(path);
  app::write_reference(session, {});
  return path;
}

// A golden case built once per test binary and shared by every test process of one ctest run
// (each gtest test is its own process): cached under the temp folder, keyed by the binary's
// size and modification time, published with an atomic rename so concurrent processes never
// see a half-built case. `build(dir)` writes dir/model and dir/case.h5. Open the case with
// open_session(cached.path, cached.model): the case records the folder it was built in.
struct CachedCase {
  std::string path, model;
};
inline CachedCase cached_golden_case(const std::string& name,
                                     const std::function<void(const std::filesystem::path& dir)>& build) {
  namespace fs = std::filesystem;
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const auto stamp = fs::last_write_time(exe).time_since_epoch().count();
  const fs::path root = fs::temp_directory_path() / "tdiff-test-cache" /
                        (std::to_string(fs::file_size(exe)) + "-" + std::to_string(stamp));
  const fs::path dir = root / name;
  if (!fs::exists(dir / "case.h5")) {
    const fs::path tmp = root / (name + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    build(tmp);
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // another process may have published it first: use theirs
    if (ec) fs::remove_all(tmp);
  }
  return {(dir / "case.h5").string(), (dir / "model").string()};
}

// `n` token ids drawn from the vocabulary with a fixed generator (the ids of random_prompts).
inline std::vector<std::int64_t> random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  return random_prompts(1, n, vocab, seed).ids[0];
}

}  // namespace tdiff::testing
