#include "exec/backend_registry.h"

#include <stdexcept>

#include "base/error.h"
#include "emu/emu_backend.h"
#include "refcpu/refcpu_backend.h"
#if defined(TDIFF_WITH_HIP)
#include "hip/hip_backend.h"
#endif

namespace tdiff {

namespace {

std::unique_ptr<Backend> make_hip(const Policy& policy, const BackendOptions& opt) {
#if defined(TDIFF_WITH_HIP)
  auto b = std::make_unique<hip::HipBackend>(policy, opt.seed);
  b->set_matrix_cores(opt.hip_gemm == "matrix");
  return b;
#else
  (void)policy, (void)opt;
  return nullptr;  // unreachable: backend_entry refuses a backend that is not built
#endif
}

#if defined(TDIFF_WITH_HIP)
// hip's outputs kept and compared on the GPU (hip/run_compare.h), one snapshot for the
// backends of all runs.
class HipDeviceComparison final : public DeviceComparison {
 public:
  void attach(Backend& b, bool keep) override { hip_of(b).set_run_snapshot(snapshot_, keep); }
  std::vector<Diff> collect(Backend& b) override {
    hip_of(b);
    std::vector<Diff> out;
    for (auto& d : snapshot_->collect(nullptr)) out.push_back({d.key, d.numel, d.differing, d.max_abs, d.base, d.other});
    return out;
  }

 private:
  static hip::HipBackend& hip_of(Backend& b) {
    auto* h = dynamic_cast<hip::HipBackend*>(&b);
    if (!h) throw std::logic_error("on-device comparison: not a hip backend");
    return *h;
  }
  std::shared_ptr<hip::RunSnapshot> snapshot_ = std::make_shared<hip::RunSnapshot>();
};
std::unique_ptr<DeviceComparison> make_hip_comparison() { return std::make_unique<HipDeviceComparison>(); }
constexpr bool kHipBuilt = true;
#else
std::unique_ptr<DeviceComparison> make_hip_comparison() { return nullptr; }  // unreachable, as make_hip
constexpr bool kHipBuilt = false;
#endif

}  // namespace

const std::vector<BackendEntry>& backend_registry() {
  static const std::vector<BackendEntry> registry = {
      {"emu", "a CPU model of the HIP kernels' numerics, no GPU needed", true, true, false, true, "",
       [](const Policy& p, const BackendOptions& o) -> std::unique_ptr<Backend> {
         return std::make_unique<emu::EmuBackend>(p, o.seed);
       }},
      // Every knob: the hip handlers make their kernel arguments with emu's knob -> spec
      // functions, so each knob has emu's meaning (src/hip/README.md, "emu is the specification").
      {"hip", "the HIP kernels on a GPU: gfx90a, or NVIDIA through src/hip/vendor.h", true, kHipBuilt, true, true,
       "configure with -DTDIFF_HIP=AMD or NVIDIA", make_hip, make_hip_comparison},
      {"refcpu", "the float64 reference on the CPU", false, true, false, false, "",
       [](const Policy&, const BackendOptions&) -> std::unique_ptr<Backend> {
         return std::make_unique<refcpu::RefCpuBackend>();
       }},
  };
  return registry;
}

const BackendEntry& backend_entry(const std::string& name) {
  for (const auto& e : backend_registry()) {
    if (e.name != name) continue;
    if (!e.built) input_error("backend '{}' is not built into this tdiff ({})", name, e.build_hint);
    return e;
  }
  input_error("unknown backend '{}' (known: {})", name, fmt::join(backend_names(true), ", "));
}

std::vector<std::string> backend_names(bool with_reference) {
  std::vector<std::string> v;
  for (const auto& e : backend_registry())
    if (e.candidate || with_reference) v.push_back(e.name);
  return v;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const Policy& policy, const BackendOptions& opt) {
  if (opt.hip_gemm != "matrix" && name != "hip")
    input_error("--hip-gemm {} applies to --backend hip, not {}", opt.hip_gemm, name);
  // emu models a split; hip simulates one on its device (the ranks one after another,
  // reduced in emu's order); engines split themselves.
  if (policy.split().active() && name != "emu" && name != "hip")
    input_error("--tp/--ep ({}): backend {} does not run a split; use --backend emu or hip", policy.split().describe(), name);
  return backend_entry(name).make(policy, opt);
}

}  // namespace tdiff
