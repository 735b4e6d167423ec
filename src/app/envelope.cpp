#include "app/envelope.h"

#include "casefile/env_record.h"
#include "emu/arith.h"

namespace tdiff::app {

std::string run_id_for(const std::string& given, const std::string& command) {
  return given.empty() ? make_run_id(command) : given;
}

std::uint64_t run_seed_for(std::uint64_t given, const std::string& run_id) {
  if (given != 0) return given;
  std::uint64_t h = 0;
  for (unsigned char ch : run_id) h = arith::mix64(h ^ ch);
  return h;
}

void add_run_facts(EnvRecord& env, const std::string& case_path, const std::map<std::string, std::string>& weight_sha256,
                   std::optional<std::uint64_t> seed, const std::string& case_sha256) {
  add_case_facts(env, case_path, weight_sha256, case_sha256);
  if (seed) env.extra["seed"] = std::to_string(*seed);
}

void show_env(const EnvRecord& env, RunInfo& info) {
  for (const auto& [k, v] : env.to_attrs()) info.env.emplace_back(k, v);
}

}  // namespace tdiff::app
