#pragma once
// The number of fields of an aggregate of scalars, for the tests that check a field table
// covers a struct (C++20 has no reflection): the most initialisers the aggregate accepts.
#include <cstddef>

namespace tdiff::testing {

struct AnyScalar {
  template <class T>
  constexpr operator T() const {
    return T{};
  }
};

template <class T, class... Given>
constexpr std::size_t field_count() {
  if constexpr (requires { T{Given{}..., AnyScalar{}}; }) return field_count<T, Given..., AnyScalar>();
  else return sizeof...(Given);
}

}  // namespace tdiff::testing
