#pragma once
// Run-to-run comparison on the device (`tdiff determinism --on-device`): run 1's stage outputs
// are kept in device memory, and every later run's outputs are compared with them where they
// are computed, element by element on their bits:
//   differing = #{ i : bits(a_i) != bits(b_i) },  max_abs = max over those i of |a_i - b_i|
//   (+inf where either side is not finite),
// so only 16 bytes a tensor cross the link, and the two tensors themselves only where they
// differ (copied after the run, for the report's metrics). Memory: one run's outputs kept, and
// during a compared run its outputs held until the comparison is collected (two runs' worth).
// Device tensors are float32 values (already rounded to their format: equal bits as float32
// exactly when equal as stored), int64 selections or bool masks.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "hip/device.h"
#include "hip/vendor.h"

namespace tdiff::hip {

// One comparison's result on the device; max_abs as the bits of a non-negative float (so an
// integer atomicMax orders them).
struct BitCount {
  unsigned long long differing;
  unsigned int max_abs_bits;
  unsigned int pad;
};

// *d_out += the comparison of a and b, `n` elements of `elem_bytes` (4: float32, 8: int64, 1:
// bool); d_out zeroed by the caller.
void compare_bits(const void* d_a, const void* d_b, std::int64_t n, int elem_bytes, BitCount* d_out, hipStream_t stream);

class RunSnapshot {
 public:
  struct Diff {
    std::string key;
    std::int64_t numel = 0, differing = 0;
    double max_abs = 0;
    Tensor base, other;  // run 1's and this run's values, only where they differ
  };

  // Run 1: a device copy of output `key` (buf holds `shape` elements of `dtype`: f32, i64 or u8).
  void keep(const std::string& key, const std::shared_ptr<DeviceBuffer>& buf, const Shape& shape, DType dtype, Stream s);
  // A later run: compares `key` with run 1's copy on stream s; `buf` is held until collect().
  // An output run 1 did not have counts as differing everywhere.
  void compare(const std::string& key, const std::shared_ptr<DeviceBuffer>& buf, const Shape& shape, DType dtype,
               Stream s);
  // After the run's kernels (syncs s): every output compared since the last collect, in the
  // order compared; releases the held tensors.
  std::vector<Diff> collect(Stream s);
  std::size_t kept_bytes() const { return kept_bytes_; }

 private:
  struct Copy {
    std::shared_ptr<DeviceBuffer> buf;
    Shape shape;
    DType dtype;
  };
  struct Pending {
    std::string key;
    Copy now;
    std::size_t slot;
  };
  BitCount* slot(std::size_t i, Stream s);  // result slot i of the current run (zeroed)
  std::map<std::string, Copy> kept_;
  std::vector<Pending> pending_;
  std::vector<DeviceBuffer> slots_;  // chunks of kSlots results, zeroed as a run takes them
  std::size_t kept_bytes_ = 0;
  static constexpr std::size_t kSlots = 1024;
};

}  // namespace tdiff::hip
