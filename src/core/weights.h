#pragma once
// The weights a config implies, checked against a model folder, and handed to backends as
// float64 (converted once, cached).
#include <map>
#include <mutex>
#include <string>

#include "core/config.h"
#include "core/safetensors.h"

namespace tdiff {

struct WeightSpec {
  Shape shape;
  bool integer = false;  // tid2eid
};

// Every parameter name (HF naming) the model of `c` reads, with its shape.
std::map<std::string, WeightSpec> expected_weights(const ModelConfig& c);

class WeightStore {
 public:
  // Opens the folder and checks that every expected weight is present with its shape and
  // a suitable dtype; throws InputError naming the file and the tensor otherwise.
  WeightStore(const std::string& dir, const ModelConfig& c);
  const ModelWeights& files() const { return weights_; }
  // The parameter as float64 (integer tensors as i64), converted on first use.
  const Tensor& f64(const std::string& name);
  const Tensor& i64(const std::string& name);

 private:
  ModelWeights weights_;
  std::map<std::string, WeightSpec> specs_;
  std::map<std::string, Tensor> cache_;
  std::mutex mutex_;
};

}  // namespace tdiff
