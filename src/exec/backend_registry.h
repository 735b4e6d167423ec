#pragma once
// Every backend tdiff knows, by name: what it is, whether this build has it, and how to make
// one. Commands read this table (option checks, help texts, errors); a new port adds one row
// in backend_registry.cpp and nothing else in src/cli.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "numerics/policy.h"
#include "exec/device_comparison.h"

namespace tdiff {

struct BackendOptions {
  std::uint64_t seed = 0;            // run seed (atomic orders, unstable ties)
  std::string hip_gemm = "matrix";   // hip: "matrix" (matrix cores) or "vector" (vector ALU)
};

struct BackendEntry {
  std::string name;         // "emu", "hip", "refcpu"
  std::string description;  // one line for --help and `tdiff info --backends`
  bool candidate = true;    // takes a numerics policy (refcpu does not: it is the reference)
  bool built = true;        // compiled into this tdiff
  bool gpu = false;         // needs a device
  bool every_knob = false;  // implements every knob of the catalogue (audit needs it)
  std::string build_hint;   // how to get it when !built
  std::function<std::unique_ptr<Backend>(const Policy&, const BackendOptions&)> make;
  // Run-to-run comparison on the backend's device (determinism --on-device); null: none.
  std::function<std::unique_ptr<DeviceComparison>()> device_comparison = nullptr;
};

const std::vector<BackendEntry>& backend_registry();
// InputError naming the backend when it is unknown or not built into this tdiff.
const BackendEntry& backend_entry(const std::string& name);
// Names for option checks: every candidate backend (built or not, so an unbuilt one gets the
// "not built" error instead of CLI11's "not in set"), plus refcpu when `with_reference`.
std::vector<std::string> backend_names(bool with_reference = false);
// A backend by name; InputError as backend_entry, and for hip_gemm != "matrix" on a backend
// other than hip.
std::unique_ptr<Backend> make_backend(const std::string& name, const Policy& policy, const BackendOptions& opt = {});

}  // namespace tdiff
