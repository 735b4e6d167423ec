// Reading verdict policies: the TOML thresholds file and the command-line overrides.
#include <charconv>
#include <filesystem>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#include "base/error.h"
#include "diff/thresholds.h"

namespace tdiff {

namespace {

double number_of(const toml::node& node, const std::string& where) {
  if (auto v = node.value<double>()) return *v;  // integers convert too
  input_error("{}: expected a number", where);
}

std::string where_of(const std::string& path, const toml::node& node, const std::string& what) {
  const auto& src = node.source();
  return src.begin.line ? fmt::format("{}:{}: {}", path, src.begin.line, what) : fmt::format("{}: {}", path, what);
}

// The numeric keys of one table (the "stages" key excepted) as threshold values.
std::vector<std::pair<std::string, double>> table_values(const toml::table& tbl, const std::string& path,
                                                         const std::string& what) {
  std::vector<std::pair<std::string, double>> values;
  Thresholds probe;
  for (const auto& [key, node] : tbl) {
    const std::string k(key.str());
    if (k == "stages") continue;
    const std::string where = where_of(path, node, fmt::format("{} key '{}'", what, k));
    const double v = number_of(node, where);
    try {
      set_threshold(probe, k, v);
    } catch (const InputError& e) {
      input_error("{}: {}", where, e.what());
    }
    values.emplace_back(k, v);
  }
  return values;
}

std::vector<std::string> rule_patterns(const toml::table& rule, const std::string& path, const std::string& what) {
  const toml::node* node = rule.get("stages");
  if (!node) input_error("{}: {} has no 'stages' pattern", path, what);
  std::vector<std::string> out;
  if (auto s = node->value<std::string>()) out.push_back(*s);
  else if (auto arr = node->as_array()) {
    for (const auto& e : *arr) {
      auto s2 = e.value<std::string>();
      if (!s2) input_error("{}", where_of(path, e, what + ": 'stages' must hold strings"));
      out.push_back(*s2);
    }
  }
  if (out.empty()) input_error("{}", where_of(path, *node, what + ": 'stages' must be a glob or a list of globs"));
  for (const auto& p : out)
    if (p.empty()) input_error("{}", where_of(path, *node, what + ": empty stage pattern"));
  return out;
}

}  // namespace

std::optional<ThresholdPolicy> named_thresholds(const std::string& name) {
  ThresholdPolicy p;
  if (name == "precision") return p;
  if (name != "paper" && name != "scaled") return std::nullopt;
  set_threshold(p.defaults, "tolerance", 0.0);
  if (name == "paper") set_threshold(p.defaults, "max_abs_scaled", 0.0);
  return p;
}

ThresholdPolicy load_thresholds(const std::string& path) {
  if (auto named = named_thresholds(path)) return *named;
  if (!std::filesystem::is_regular_file(path))
    input_error("thresholds file not found: {} (named sets: precision, scaled, paper)", path);
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    input_error("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  ThresholdPolicy p;
  for (const auto& [key, node] : doc) {
    const std::string k(key.str());
    if (k == "default") {
      const toml::table* t = node.as_table();
      if (!t) input_error("{}", where_of(path, node, "[default] must be a table"));
      for (const auto& [name, value] : table_values(*t, path, "[default]")) set_threshold(p.defaults, name, value);
    } else if (k == "rule") {
      const toml::array* rules = node.as_array();
      if (!rules) input_error("{}", where_of(path, node, "rules must be written [[rule]]"));
      int index = 0;
      for (const auto& r : *rules) {
        const std::string what = fmt::format("rule {}", ++index);
        const toml::table* t = r.as_table();
        if (!t) input_error("{}", where_of(path, r, what + " must be a table"));
        ThresholdRule rule{rule_patterns(*t, path, what), table_values(*t, path, what),
                           fmt::format("{} {}", path, what)};
        p.rules.push_back(std::move(rule));
      }
    } else {
      input_error("{}", where_of(path, node, fmt::format("unknown section '{}' (expected [default] or [[rule]])", k)));
    }
  }
  return p;
}

void add_threshold_override(ThresholdPolicy& p, const std::string& spec) {
  // "PATTERN:key=value,..." -- a glob never contains '=', so the last ':' before the first
  // '=' separates the pattern from the values.
  const auto eq = spec.find('=');
  const auto colon = eq == std::string::npos ? spec.rfind(':') : spec.rfind(':', eq);
  const std::string pattern = colon == std::string::npos ? "" : spec.substr(0, colon);
  const std::string body = colon == std::string::npos ? spec : spec.substr(colon + 1);
  ThresholdRule rule;
  rule.origin = fmt::format("override '{}'", spec);
  std::stringstream items(body);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto e = item.find('=');
    if (e == std::string::npos) input_error("{}: expected key=value, got '{}'", rule.origin, item);
    const std::string key = item.substr(0, e), text = item.substr(e + 1);
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
      input_error("{}: '{}' is not a number", rule.origin, text);
    Thresholds probe;
    set_threshold(probe, key, v);  // rejects unknown keys now, with the key named
    rule.values.emplace_back(key, v);
  }
  if (rule.values.empty()) input_error("{}: no key=value given", rule.origin);
  // Without a pattern the override applies to every stage, after (and over) the file's rules.
  rule.patterns.push_back(pattern.empty() ? "*" : pattern);
  p.rules.push_back(std::move(rule));
}

}  // namespace tdiff
