#include "base/runtime_env.h"

#include <unistd.h>

#include <cstdlib>

namespace tdiff {

const char* openblas_coretype_for_this_cpu() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

void reexec_with_runtime_env(char** argv) {
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY")) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  const char* core = openblas_coretype_for_this_cpu();
  if (core && !std::getenv("OPENBLAS_CORETYPE")) {
    ::setenv("OPENBLAS_CORETYPE", core, 1);
    changed = true;
  }
  if (changed) ::execv("/proc/self/exe", argv);
}

}  // namespace tdiff
