#pragma once
// The parameters a config implies: every name (HF naming) with its shape.
#include <map>
#include <string>

#include "base/tensor.h"
#include "model/config.h"

namespace tdiff {

struct WeightSpec {
  Shape shape;
  bool integer = false;  // tid2eid
};

// Every parameter name (HF naming) the model of `c` reads, with its shape.
std::map<std::string, WeightSpec> expected_weights(const ModelConfig& c);

}  // namespace tdiff
