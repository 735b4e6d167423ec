#pragma once
// The split's reduction settings (numerics/policy.h, Split) in a header of their own, so that
// device code (hip/collective.hip) reads the same enumerations as the policy.
#include <cstdint>

namespace tdiff {

// The order an all-reduce adds the ranks' partials (emu/collective.h).
enum class AllReduce : std::uint8_t { ring, tree, fixed, custom1, custom2 };
// Where a tensor-parallel MoE reduces: routed + shared per rank then one all-reduce (SGLang's
// forward_normal), or each of them reduced on its own.
enum class MoeReduce : std::uint8_t { sum_then_reduce, reduce_each };

}  // namespace tdiff
