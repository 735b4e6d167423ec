#pragma once
// Where an element of a stage's tensor sits in the model's terms (batch row, token, head,
// channel, ...), from the tensor's shape and its stage's layout (op_table.h RowLayout): what a
// report prints beside a flat index so that a reader can find the error.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

// (dimension name, index) pairs, outermost first: {{"row", 1}, {"token", 23}, {"head", 2},
// {"ch", 17}}. `seq`: the case's tokens per row, which splits the flattened token index of
// the router and MoE stages ([B*S, ...]) into row and token (0: left flat, named "token").
// Names of other stages fall back to "dim0", "dim1", ...
std::vector<std::pair<std::string, std::int64_t>> element_location(const std::string& stage, const Shape& shape,
                                                                   std::int64_t flat, std::int64_t seq);
// "row 1, token 23, head 2, ch 17"; "" for a negative index.
std::string location_text(const std::string& stage, const Shape& shape, std::int64_t flat, std::int64_t seq);

}  // namespace tdiff
