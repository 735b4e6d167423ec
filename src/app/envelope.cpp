#include "app/envelope.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "base/error.h"
#include "casefile/env_record.h"
#include "emu/arith.h"

namespace tdiff::app {

bool is_safe_run_id(const std::string& id) {
  constexpr std::size_t kMaxLength = 128;  // a folder name, well inside NAME_MAX (255)
  if (id.empty() || id.size() > kMaxLength || !std::isalnum(static_cast<unsigned char>(id[0]))) return false;
  if (id.find("..") != std::string::npos) return false;
  return std::all_of(id.begin(), id.end(),
                     [](unsigned char ch) { return std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.'; });
}

void check_run_id(const std::string& id, const std::string& where) {
  // {:?}: the id quoted and escaped, so a control character in it is shown, not sent
  if (!is_safe_run_id(id))
    input_error(
        "{} {:?} is not a plain name (1 to 128 letters, digits, '-', '_' or '.', starting with a letter or digit, "
        "no '..')",
        where, id);
}

std::string shown_run_id(const std::string& id) { return is_safe_run_id(id) ? id : fmt::format("{:?}", id); }

std::string run_id_for(const std::string& given, const std::string& command) {
  if (given.empty()) return make_run_id(command);
  check_run_id(given, "--run-id");
  return given;
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
