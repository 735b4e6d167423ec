#pragma once
// The one place a stage's tensor is read from a file by its name: a case's /reference, a
// saved run (/runs/<run-id>), a floor, a candidate dump. Before any caller sees it, its dtype
// and shape are checked against the case's tensor contract (model/tensor_contract.h) and a
// selection's ids against their range, so a tampered or foreign tensor is one InputError that
// names the file, the dataset and what was expected (exit 2), never a read past its end, an
// abort inside a kernel or a wrong expert handed to the candidate.
#include <optional>
#include <string>

#include "base/tensor.h"
#include "casefile/h5_reader.h"
#include "model/tensor_contract.h"

namespace tdiff {

// "<group>/<stage>/<tensor>" of `file` ("/" or "" for the root). InputError when the key is no
// output of the model's stages, when the dataset is missing, or breaks the contract. A dump's
// tensor comes back in the contract's shape (its size-1 dimensions aside, the same elements).
Tensor read_stage_tensor(const H5File& file, const std::string& group, const std::string& key,
                         const TensorContract& contract, StoredBy by);
// Its dtype and shape only, without reading the data.
void check_stage_tensor(const H5File& file, const std::string& group, const std::string& key,
                        const TensorContract& contract, StoredBy by);

// The reference's conditioning of one float output (exec/conditioning.h): the largest
// amplification of an input error on each row of its last axis (float32, the output's shape
// with that axis 1; never below 1) and G, the amplification of its relative L2 error. Stored
// beside the reference under /conditioning/<stage>/<tensor> (attribute gain_l2).
struct StoredConditioning {
  Tensor row_gain;
  double gain_l2 = 1.0;
};

// /conditioning/<key> of a case, checked: float32 in the contract's shape of the key with its
// last axis 1 (rank-1 outputs: [1]), finite gains >= 1 (InputError naming the dataset
// otherwise); nullopt when the case stores none for the key (a reference written before
// conditioning was stored, or an integer output).
std::optional<StoredConditioning> read_conditioning(const H5File& file, const std::string& key,
                                                    const TensorContract& contract);
// The row gains' shape for an output of `shape`.
Shape conditioning_shape(const Shape& shape);

// "<group>/<key>" as a dataset path ("/" + key for the root).
std::string stage_dataset(const std::string& group, const std::string& key);

}  // namespace tdiff
