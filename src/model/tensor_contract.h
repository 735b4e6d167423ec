#pragma once
// The tensor contract: what every stage output of a case must be (model-spec §4 and the worked
// example of §9), for the case's batch: its name, its value class, its exact shape with named
// axes and, for selections, the range of valid values. Built from the stage graph: the leading
// axes from the operator table's `layout` column, the trailing ones from the kind (elementwise
// kinds keep the shape of their input). The reference's own outputs are the truth it is tested
// against (tests/unit/model/tensor_contract_test.cpp); every tensor read from a case or a dump
// is checked against it before use (casefile/stored_tensor.h), so a tensor of another dtype or
// shape, or a selection out of range, is one InputError and never a read past its end.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "model/stage_graph.h"

namespace tdiff {

// What a tensor's elements are: floating-point values, integer ids (selections) or flags (masks).
enum class ValueClass { floating, index, boolean };

struct Axis {
  std::string name;  // model-spec notation in ASCII: "B", "S", "N" (= B*S), "D", "n", "k", "H", "d", "G*R_o"
  std::int64_t size = 0;
};

// Valid ids are in [lo, hi); the indexer's -1 marks "no entry".
struct IdRange {
  std::int64_t lo = 0, hi = 0;
  const char* what = "";  // "expert ids", "entry ids"
};

struct TensorSpec {
  std::string stage, tensor;
  OpKind kind = OpKind::embed;
  ValueClass value = ValueClass::floating;
  std::vector<Axis> axes;
  std::optional<IdRange> range;  // selections only

  std::string key() const { return stage + "/" + tensor; }
  Shape shape() const;
  std::string axes_str() const;  // "[B,S,H,d]"
};

// Who stored a tensor, which decides how strictly its dtype and shape are held:
//   reference  refcpu's f64, i64 and bool exactly (its readers compute on those types);
//   saved_run  a backend's outputs as `tdiff run --save` stores them: any float, any integer
//              width, masks as bool or integers; the exact shape;
//   dump       what an external engine wrote: as a saved run, and size-1 dimensions may be
//              added or dropped ([1,200] holds what [200] holds).
enum class StoredBy { reference, saved_run, dump };

class TensorContract {
 public:
  // B rows of S tokens (a case's Batch: rows(), seq()).
  TensorContract(const std::vector<Stage>& stages, const ModelConfig& config, std::int64_t B, std::int64_t S);

  // Every stage output in stage order.
  const std::vector<TensorSpec>& specs() const { return specs_; }
  // "<stage>/<tensor>"; null when no stage of the model has that output.
  const TensorSpec* find(const std::string& key) const;

  // InputError "<file>: dataset '<dataset>' is <dtype> <shape>, expected ..." when the stored
  // dtype or shape is not what `spec` says.
  static void check_layout(const TensorSpec& spec, DType dtype, const Shape& shape, StoredBy by, const std::string& file,
                           const std::string& dataset);
  // InputError naming the first element outside the selection's range, or a flag other than 0 and 1.
  static void check_values(const TensorSpec& spec, const Tensor& t, const std::string& file, const std::string& dataset);
  // The dtype and shape a spec allows, as the messages word them: "f64 [B,S,D] = [2,40,64]".
  static std::string expected(const TensorSpec& spec, StoredBy by);

 private:
  std::vector<TensorSpec> specs_;
  std::map<std::string, std::size_t> index_;
};

const char* value_class_name(ValueClass v);  // "float", "index", "bool"

}  // namespace tdiff
