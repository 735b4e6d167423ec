// The split's settings (numerics/policy.h Split): parsing, naming and the model's constraints.
#include <charconv>

#include <fmt/format.h>

#include "base/error.h"
#include "numerics/policy.h"

namespace tdiff {

namespace {

const std::vector<std::pair<std::string, AllReduce>>& allreduce_names() {
  static const std::vector<std::pair<std::string, AllReduce>> names{{"ring", AllReduce::ring},
                                                                    {"tree", AllReduce::tree},
                                                                    {"fixed", AllReduce::fixed},
                                                                    {"custom1", AllReduce::custom1},
                                                                    {"custom2", AllReduce::custom2}};
  return names;
}

int positive_int(const std::string& key, const std::string& value) {
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 1)
    input_error("{}={}: expected a whole number of at least 1", key, value);
  return n;
}

}  // namespace

std::string allreduce_name(AllReduce a) {
  for (const auto& [name, v] : allreduce_names())
    if (v == a) return name;
  return "?";
}

std::string moe_reduce_name(MoeReduce m) { return m == MoeReduce::sum_then_reduce ? "sum_then_reduce" : "reduce_each"; }

std::string Split::describe() const {
  return fmt::format("tp={} ep={} allreduce={} moe_reduce={} channels={}", tp, ep, allreduce_name(allreduce),
                     moe_reduce_name(moe_reduce), channels);
}

bool is_split_setting(const std::string& key) {
  return key == "tp" || key == "ep" || key == "allreduce" || key == "moe_reduce" || key == "channels";
}

void set_split(Split& split, const std::string& key, const std::string& value) {
  if (key == "tp") {
    split.tp = value == "0" ? 0 : positive_int(key, value);
    if (split.tp != 1 && split.tp != 2 && split.tp != 4 && split.tp != 8)
      input_error("tp={}: tensor-parallel size must be 1, 2, 4 or 8 (it divides V4-Flash's 64 heads and 8 output groups)",
                  value);
  } else if (key == "ep") {
    split.ep = positive_int(key, value);
  } else if (key == "channels") {
    split.channels = positive_int(key, value);
    if (split.channels > 64) input_error("channels={}: NCCL and RCCL run at most 64 channels", value);
  } else if (key == "allreduce") {
    for (const auto& [name, v] : allreduce_names())
      if (name == value) return void(split.allreduce = v);
    input_error("allreduce={}: unknown order (ring, tree, fixed, custom1, custom2)", value);
  } else if (key == "moe_reduce") {
    if (value != "sum_then_reduce" && value != "reduce_each")
      input_error("moe_reduce={}: expected sum_then_reduce or reduce_each", value);
    split.moe_reduce = value == "reduce_each" ? MoeReduce::reduce_each : MoeReduce::sum_then_reduce;
  } else {
    input_error("{}: not a split setting (tp, ep, allreduce, moe_reduce, channels)", key);
  }
}

void check_split(const Split& s, const ModelConfig& c) {
  if (s.tp > 1 && (c.num_attention_heads % s.tp != 0 || c.o_groups % s.tp != 0))
    input_error("tp={}: the model has {} heads and {} output groups; the tensor-parallel size must divide both", s.tp,
                c.num_attention_heads, c.o_groups);
  if (s.tp > 1 && s.ep == 1 && c.moe_intermediate_size % s.tp != 0)
    input_error("tp={}: the experts' width {} does not split evenly over {} ranks", s.tp, c.moe_intermediate_size, s.tp);
  if (s.ep > 1 && c.n_routed_experts % s.ep != 0)
    input_error("ep={}: the model's {} routed experts do not split evenly over {} ranks", s.ep, c.n_routed_experts, s.ep);
}

}  // namespace tdiff
