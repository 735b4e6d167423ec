#include "model/stage_names.h"

#include <cctype>
#include <map>
#include <stdexcept>

namespace tdiff {

namespace {

struct Catalogue {
  std::map<std::string, StageName> outside;  // prologue and head stages, by name
  std::map<std::string, OpKind> in_layer;    // layer stages, by op_class
};

const Catalogue& catalogue() {
  static const Catalogue cat = [] {
    ModelConfig c;  // the default dimensions: only names and kinds are read
    for (LayerType lt : {LayerType::sliding, LayerType::csa, LayerType::hca})
      for (MlpType mt : {MlpType::hash_moe, MlpType::moe}) {
        c.layer_types.push_back(lt);
        c.mlp_types.push_back(mt);
      }
    c.num_hidden_layers = static_cast<std::int64_t>(c.layer_types.size());
    Catalogue out;
    bool after_layers = false;
    for (const Stage& s : build_stages(c)) {
      if (s.layer < 0) {
        out.outside[s.name] = {s.kind, -1, after_layers ? ModelPart::head : ModelPart::prologue};
        continue;
      }
      after_layers = true;
      const auto [it, added] = out.in_layer.emplace(s.op_class, s.kind);
      if (!added && it->second != s.kind)
        throw std::logic_error("stage class " + s.op_class + " has two operator kinds");
    }
    return out;
  }();
  return cat;
}

}  // namespace

int stage_layer(const std::string& stage) {
  if (stage.size() < 3 || stage[0] != 'L' || !std::isdigit(static_cast<unsigned char>(stage[1]))) return -1;
  std::size_t i = 1;
  int layer = 0;
  while (i < stage.size() && std::isdigit(static_cast<unsigned char>(stage[i])))
    layer = layer * 10 + (stage[i++] - '0');
  return i < stage.size() && stage[i] != '.' ? -1 : layer;
}

std::optional<StageName> parse_stage_name(const std::string& stage) {
  const Catalogue& cat = catalogue();
  const int layer = stage_layer(stage);
  if (layer < 0) {
    const auto it = cat.outside.find(stage);
    if (it == cat.outside.end()) return std::nullopt;
    return it->second;
  }
  const auto dot = stage.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const auto it = cat.in_layer.find(stage.substr(dot + 1));
  if (it == cat.in_layer.end()) return std::nullopt;
  return StageName{it->second, layer, ModelPart::layers};
}

ModelPart stage_part(const std::string& stage) {
  if (const auto s = parse_stage_name(stage)) return s->part;
  if (stage_layer(stage) >= 0) return ModelPart::layers;
  if (stage.starts_with("final.") || stage.starts_with("lm_head") || stage == "logits") return ModelPart::head;
  return ModelPart::prologue;
}

}  // namespace tdiff
