#pragma once
// The one place a stage's tensor is read from a file by its name: a case's /reference, a
// saved run (/runs/<run-id>), a floor, a candidate dump. Before any caller sees it, its dtype
// and shape are checked against the case's tensor contract (model/tensor_contract.h) and a
// selection's ids against their range, so a tampered or foreign tensor is one InputError that
// names the file, the dataset and what was expected (exit 2), never a read past its end, an
// abort inside a kernel or a wrong expert handed to the candidate.
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

// "<group>/<key>" as a dataset path ("/" + key for the root).
std::string stage_dataset(const std::string& group, const std::string& key);

}  // namespace tdiff
