#pragma once
// Launch-error check for the kernel launchers (device code only: includes the vendor header).
#include <stdexcept>
#include <string>

#include "hip/vendor.h"

namespace tdiff::hip {

// Throws when the launch just made failed (bad configuration, no device, a sticky fault).
inline void check_launch(const char* kernel) {
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) throw std::runtime_error(std::string("hip: launch of ") + kernel + " failed: " + hipGetErrorString(e));
}

inline unsigned blocks_for(std::int64_t items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

}  // namespace tdiff::hip
