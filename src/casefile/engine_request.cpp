#include "casefile/engine_request.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"

namespace tdiff {

namespace {

constexpr const char* kFormat = "tdiff-engine-request";

std::string text_field(const nlohmann::json& j, const char* key, const std::string& path, bool required) {
  if (!j.contains(key)) {
    if (required) input_error("{}: engine request without \"{}\"", path, key);
    return "";
  }
  if (!j[key].is_string()) input_error("{}: engine request field \"{}\" is not a string", path, key);
  return j[key].get<std::string>();
}

}  // namespace

void write_engine_request(const std::string& path, const EngineRequest& r) {
  const nlohmann::json j = {{"format", kFormat},        {"version", 1},       {"case", r.case_path},
                            {"dump", r.dump_path},      {"mode", r.mode},     {"substitute", r.substitute},
                            {"seed", r.seed}};
  AtomicFile f(path);
  f.write(j.dump(1) + "\n");
  f.commit();
}

EngineRequest read_engine_request(const std::string& path) {
  std::ifstream in(path);
  if (!in) input_error("{}: cannot read the engine request", path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) input_error("{}: the engine request is not a JSON object", path);
  if (text_field(j, "format", path, true) != kFormat) input_error("{}: not a {} (format)", path, kFormat);
  if (!j.contains("version") || j["version"] != 1) input_error("{}: engine request version is not 1", path);
  EngineRequest r;
  r.case_path = text_field(j, "case", path, true);
  r.dump_path = text_field(j, "dump", path, true);
  r.mode = j.contains("mode") ? text_field(j, "mode", path, true) : "run";
  if (r.mode != "run" && r.mode != "replay" && r.mode != "isolated")
    input_error("{}: engine request mode '{}' is not run, replay or isolated", path, r.mode);
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) input_error("{}: engine request field \"seed\" is not a non-negative integer", path);
    r.seed = j["seed"].get<std::uint64_t>();
  }
  if (j.contains("substitute")) {
    if (!j["substitute"].is_array()) input_error("{}: engine request field \"substitute\" is not an array", path);
    for (const auto& s : j["substitute"]) {
      if (!s.is_string()) input_error("{}: engine request \"substitute\" holds a non-string", path);
      r.substitute.push_back(s.get<std::string>());
    }
  }
  return r;
}

}  // namespace tdiff
