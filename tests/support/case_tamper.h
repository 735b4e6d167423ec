#pragma once
// Tests that feed tdiff a damaged case or dump change one dataset here, through tdiff's own
// writer (H5Writer updating the file in place, atomically): whatever the writer maintains
// beside the data (an integrity record of the case, say) stays consistent, so what the test
// checks is tdiff's reading of the bad tensor, not a file tdiff would refuse anyway.
#include <string>

#include "base/tensor.h"
#include "casefile/h5io.h"

namespace tdiff::testing {

// Replaces `dataset` of `file` with `t` (any dtype and shape), or, with `attr` set, sets the
// string attribute `attr` of the object `dataset` to `value` instead.
inline void tamper(const std::string& file, const std::string& dataset, const Tensor& t, const std::string& attr = "",
                   const std::string& value = "") {
  H5Writer w(file, file);
  if (attr.empty()) w.write(dataset, t);
  else w.set_attr(dataset, attr, value);
  w.commit();
}

}  // namespace tdiff::testing
