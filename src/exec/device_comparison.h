#pragma once
// Run-to-run comparison where a backend computes (`tdiff determinism --on-device`): run 1's
// stage outputs stay on the backend's device, and every later run is compared with them
// there, so only the comparison (and the tensors that differ) reach the host; determinism's
// runs read nothing else. A backend offers it through its registry entry (hip: hip/run_compare.h).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/tensor.h"

namespace tdiff {

class DeviceComparison {
 public:
  struct Diff {
    std::string key;  // "stage/tensor"
    std::int64_t numel = 0, differing = 0;  // elements whose bits differ from run 1's
    double max_abs = 0;                     // the largest |difference| among them (inf: a side not finite)
    Tensor base, other;                     // run 1's and this run's values, only where they differ
  };
  virtual ~DeviceComparison() = default;
  // A fresh backend of one run: keep its outputs (run 1) or compare them with run 1's. The
  // backend hands back undefined tensors for its outputs.
  virtual void attach(Backend& backend, bool keep) = 0;
  // After the run (the backend finished): every output compared, in the order computed.
  virtual std::vector<Diff> collect(Backend& backend) = 0;
};

}  // namespace tdiff
