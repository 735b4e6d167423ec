#pragma once
// Settings the OpenMP runtime and OpenBLAS read once, when they load (before main), so a
// program that wants them sets them and executes itself again:
// - OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead of spinning; on a shared or
//   busy machine spinning threads took the cores from the working ones (a 2-thread golden:
//   0.3-5.7 s against 0.1 s).
// - OPENBLAS_CORETYPE from the CPU's own feature flags: Debian's OpenBLAS (0.3.21) does not
//   know every recent CPU by model number and then falls back to its SSE3 "Prescott" kernels
//   (seen on the device host, an Emerald Rapids Xeon: DGEMM 128 GFLOP/s instead of 719).
// Either is left alone when the environment already sets it.
namespace tdiff {

// The OpenBLAS core type for this CPU's vector units ("Cooperlake", "SkylakeX", "Haswell"),
// or nullptr for a CPU without AVX2 and FMA (OpenBLAS's own detection then stands).
const char* openblas_coretype_for_this_cpu();

// Sets what is unset and executes /proc/self/exe with the same arguments; returns only when
// nothing needed setting or the exec failed (the program then runs as it is).
void reexec_with_runtime_env(char** argv);

}  // namespace tdiff
