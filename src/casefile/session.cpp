#include "casefile/session.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tdiff {

CaseSession open_session(const std::string& case_path, const std::string& model_dir) {
  CaseSession s;
  s.path = case_path;
  // One open file for everything the session reads: the inputs here, the reference later.
  const H5File file(case_path);
  s.info = read_case(file);
  const std::string dir = case_model_folder(case_path, s.info, model_dir);
  s.weights = std::make_unique<WeightStore>(dir, s.info.config);
  s.stages = build_stages(s.info.config);
  s.reference_store = std::make_shared<ReferenceStore>(
      file, std::make_shared<const TensorContract>(s.stages, s.info.config, s.info.batch.rows(), s.info.batch.seq()));
  s.reference_store->use_model(dir, s.weights.get());  // a boundaries reference recomputes its layers with it
  return s;
}

std::string case_model_folder(const std::string& case_path, const CaseInfo& info, const std::string& model_dir) {
  const std::string dir = model_dir.empty() ? info.model_path : model_dir;
  if (!std::filesystem::is_directory(dir))
    input_error("{}: model folder '{}' does not exist (pass --model DIR)", case_path, dir);
  // Same model: the parsed configs must agree (the JSON text may differ in formatting).
  const ModelConfig mc = load_config(dir + "/config.json");
  if (nlohmann::json(config_to_json(mc)) != config_to_json(info.config))
    input_error("{}: the model in '{}' has a different config.json than the case records", case_path, dir);
  return dir;
}

TieRule parse_tie_rule(const std::string& text) {
  if (text == "lowest-index") return TieRule::lowest_index;
  if (text == "torch-cpu") return TieRule::torch_cpu;
  input_error("unknown tie rule '{}' (lowest-index or torch-cpu)", text);
}

const char* tie_rule_name(TieRule r) { return r == TieRule::torch_cpu ? "torch-cpu" : "lowest-index"; }

}  // namespace tdiff
