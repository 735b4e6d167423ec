#pragma once
// What a stage name says, for dumps that carry only names ("L03.attn.core/o"): the stage's
// operator kind, layer and part of the model. Names are looked up among the stages
// build_stages makes for a model with every layer type and both MLP types, the layer number
// read from the "Lxx." prefix, so the stage names of any model's dump resolve.
#include <optional>
#include <string>

#include "model/stage_graph.h"

namespace tdiff {

enum class ModelPart { prologue, layers, head };

struct StageName {
  OpKind kind;
  int layer;  // -1 outside the layers
  ModelPart part;
};

// Nullopt for names build_stages never makes ("logits", "inputs", a hand-made dump's keys).
std::optional<StageName> parse_stage_name(const std::string& stage);

// The layer number of "Lxx.<...>" names, -1 for the others.
int stage_layer(const std::string& stage);

// The stage's part when it is a stage name; otherwise layers for "Lxx." names, head for
// "final.*", "lm_head*" and "logits", prologue for the rest.
ModelPart stage_part(const std::string& stage);

}  // namespace tdiff
