#pragma once
// The one file that names a GPU vendor; everything else in src/hip (kernels, launchers, the
// backend) uses the names below and no vendor conditional of its own. Two parts:
//   1. What every compiler of the build sees, g++ for the host code included: hipStream_t as
//      the vendor's own pointer type, forward-declared (AMD: HIP's `struct ihipStream_t*`;
//      NVIDIA: cudaStream_t = CUstream_st*), and the platform's name. The NVIDIA build defines
//      TDIFF_HIP_NVIDIA for its .hip (CUDA) sources and TDIFF_HIP_NV for every target linking
//      tdiff_hip (src/hip/CMakeLists.txt); either selects the CUDA spelling. Redeclaring an
//      alias to the same type is legal C++, so part 2's runtime headers agree with it.
//   2. With a GPU compiler (nvcc, hipcc): the hip* runtime names (mapped to CUDA for the
//      NVIDIA build, plain HIP for the AMD build), the wavefront width, the vendor's
//      capabilities (vendor::), the matrix-core products (mma::) and asynchronous copies
//      (async::). Debian's HIP 5.2 headers for the NVIDIA platform do not compile with
//      CUDA 13, hence this mapping of our own.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#if defined(TDIFF_HIP_NVIDIA) || defined(TDIFF_HIP_NV)
struct CUstream_st;
using hipStream_t = CUstream_st*;
namespace tdiff::hip::vendor {
inline constexpr const char* kPlatform = "CUDA (hip names mapped by src/hip/vendor.h)";
}
#else
struct ihipStream_t;
using hipStream_t = ihipStream_t*;
namespace tdiff::hip::vendor {
inline constexpr const char* kPlatform = "HIP/ROCm";
}
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)

#if defined(TDIFF_HIP_NVIDIA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorMemoryAllocation = cudaErrorMemoryAllocation;
inline constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
inline constexpr auto hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr auto hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr auto hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
inline constexpr unsigned hipEventDisableTiming = cudaEventDisableTiming;

#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamCreateWithPriority cudaStreamCreateWithPriority
#define hipDeviceGetStreamPriorityRange cudaDeviceGetStreamPriorityRange
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventCreate cudaEventCreate
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventQuery cudaEventQuery
#define hipEventElapsedTime cudaEventElapsedTime

// Lanes of one wavefront/warp, known at compile time on both sides of the build.
inline constexpr int kWaveSize = 32;
// A kernel's workgroup size, and how many workgroups should fit on one SM at once (the
// compiler then keeps the registers per thread under that share).
#define TDIFF_LAUNCH_BOUNDS(threads, per_sm) __launch_bounds__(threads, per_sm)
#define TDIFF_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
// The lanes of one wavefront wait for each other, and their LDS writes become visible to them.
#define TDIFF_WAVE_SYNC() __syncwarp()
// One bit per lane of the (whole, converged) wavefront: lane l's predicate in bit l.
#define TDIFF_BALLOT(pred) static_cast<unsigned long long>(__ballot_sync(0xffffffffu, (pred)))
#else
#include <hip/hip_runtime.h>
#if defined(__AMDGCN_WAVEFRONT_SIZE)
inline constexpr int kWaveSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWaveSize = 64;  // host pass of the AMD build: CDNA2 wavefronts
#endif
#define TDIFF_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#define TDIFF_BALLOT(pred) static_cast<unsigned long long>(__ballot((pred)))
// A wavefront runs in lockstep; the fences order its LDS writes before the reads after it.
#define TDIFF_WAVE_SYNC()                                    \
  do {                                                       \
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");   \
    __builtin_amdgcn_wave_barrier();                         \
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");   \
  } while (0)
// HIP's second bound means waves per execution unit, not workgroups per CU: only the size.
#define TDIFF_LAUNCH_BOUNDS(threads, per_sm) __launch_bounds__(threads)
#endif

// ---- Capabilities: what the kernels and the host code ask of the vendor ------------------
//   kMaxLdsBytes        the LDS (shared memory) one workgroup may take: 160 KiB on NVIDIA
//                       (with the opt-in above 48 KiB), gfx90a's 64 KiB on AMD
//   arch_name(p)        the device's architecture: "sm_90" (NVIDIA), gcnArchName (AMD, e.g.
//                       "gfx90a:sramecc+:xnack-")
//   has_matrix_cores(a) whether architecture `a` has the matrix instructions of mma:: below
//                       (bf16 tensor-core fragments need sm_80; MFMA on gfx90a, gfx908, gfx94x)
namespace tdiff::hip::vendor {
#if defined(TDIFF_HIP_NVIDIA)
inline constexpr std::size_t kMaxLdsBytes = 160 * 1024;
inline std::string arch_name(const hipDeviceProp_t& p) { return "sm_" + std::to_string(p.major) + std::to_string(p.minor); }
inline bool has_matrix_cores(const std::string& arch) {
  return arch.size() >= 5 && arch.compare(0, 3, "sm_") == 0 && std::stoi(arch.substr(3)) >= 80;
}
#else
inline constexpr std::size_t kMaxLdsBytes = 64 * 1024;
inline std::string arch_name(const hipDeviceProp_t& p) { return p.gcnArchName; }
inline bool has_matrix_cores(const std::string& arch) {
  for (const char* a : {"gfx90a", "gfx908", "gfx940", "gfx941", "gfx942"})
    if (arch.compare(0, std::char_traits<char>::length(a), a) == 0) return true;
  return false;
}
#endif
}  // namespace tdiff::hip::vendor

// ---- Matrix cores: one 16x16x16 product per wavefront/warp ------------------------------
// The GEMM's matrix-core path (gemm.hip) sees only these names. Operands are 16-bit values
// (bf16 or fp16 bit patterns) in LDS; A is [16 rows][16 k], B is [16 columns][16 k] (the
// weight's own row-major layout), each with a row stride in elements (a multiple of 8).
//   mma::ATile / BTile   one operand tile, held across the lanes of a wavefront
//   mma::Acc             a 16x16 float accumulator tile, held across the lanes
//   load_a / load_b      LDS -> tile;   mma(c, a, b): c += A·Bᵀ (products exact, fp32 sums in
//                        the hardware's own order inside the 16-deep step)
//   BTileKN / load_b_kn  B stored the other way, [16 k][16 columns] (attention's P·V, whose
//                        V rows are keys): mma(c, a, b) then gives c += A·B
//   zero(c)              c = 0
//   store(c, lds, ld)    the tile as float [16][ld] in LDS
// NVIDIA: the wmma API (tensor cores, warp of 32). AMD: gfx90a's MFMA
// v_mfma_f32_16x16x16{bf16_1k,f16} (wavefront of 64): lane l holds A[l%16][4(l/16)..+3],
// B[4(l/16)..+3][l%16] and D[4(l/16)+j][l%16], j = 0..3. Other AMD targets have no MFMA:
// kHasMatrixCores is false there and the host keeps the vector-ALU kernels.
namespace tdiff::hip::mma {
#if defined(TDIFF_HIP_NVIDIA)
inline constexpr bool kHasMatrixCores = true;
template <bool kBf16>
using Elem = std::conditional_t<kBf16, __nv_bfloat16, __half>;
template <bool kBf16>
using ATile = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, Elem<kBf16>, nvcuda::wmma::row_major>;
template <bool kBf16>
using BTile = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Elem<kBf16>, nvcuda::wmma::col_major>;
using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
template <bool kBf16>
__device__ inline void load_a(ATile<kBf16>& a, const std::uint16_t* p, int ld) {
  nvcuda::wmma::load_matrix_sync(a, reinterpret_cast<const Elem<kBf16>*>(p), ld);
}
template <bool kBf16>
__device__ inline void load_b(BTile<kBf16>& b, const std::uint16_t* p, int ld) {
  nvcuda::wmma::load_matrix_sync(b, reinterpret_cast<const Elem<kBf16>*>(p), ld);
}
template <bool kBf16>
__device__ inline void mma(Acc& c, const ATile<kBf16>& a, const BTile<kBf16>& b) {
  nvcuda::wmma::mma_sync(c, a, b, c);
}
template <bool kBf16>
using BTileKN = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Elem<kBf16>, nvcuda::wmma::row_major>;
template <bool kBf16>
__device__ inline void load_b_kn(BTileKN<kBf16>& b, const std::uint16_t* p, int ld) {
  nvcuda::wmma::load_matrix_sync(b, reinterpret_cast<const Elem<kBf16>*>(p), ld);
}
template <bool kBf16>
__device__ inline void mma(Acc& c, const ATile<kBf16>& a, const BTileKN<kBf16>& b) {
  nvcuda::wmma::mma_sync(c, a, b, c);
}
__device__ inline void zero(Acc& c) { nvcuda::wmma::fill_fragment(c, 0.0f); }
__device__ inline void store(const Acc& c, float* p, int ld) {
  nvcuda::wmma::store_matrix_sync(p, c, ld, nvcuda::wmma::mem_row_major);
}
// The bf16 pattern of a float already representable in bf16: its top half, kept a NaN when
// the NaN's payload lay only in the bottom half.
__device__ inline std::uint16_t bf16_bits_of(unsigned u) {
  return static_cast<std::uint16_t>((u >> 16) | ((u & 0x7fffffffu) > 0x7f800000u ? 0x0040u : 0u));
}
// The 16-bit pattern of a float already representable in the format.
__device__ inline std::uint16_t bits16(float v, bool bf16) {
  return bf16 ? bf16_bits_of(__float_as_uint(v)) : __half_as_ushort(__float2half_rn(v));
}
// The float a 16-bit pattern stands for (exact).
__device__ inline float from_bits16(std::uint16_t b, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<unsigned>(b) << 16) : __half2float(__ushort_as_half(b));
}
#else
#if defined(__gfx90a__) || defined(__gfx908__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
inline constexpr bool kHasMatrixCores = true;
#else
inline constexpr bool kHasMatrixCores = false;
#endif
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef short i16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
template <bool kBf16>
struct ATile {
  std::conditional_t<kBf16, i16x4, f16x4> v;
};
template <bool kBf16>
using BTile = ATile<kBf16>;
struct Acc {
  f32x4 v;
};
__device__ inline int lane16() { return static_cast<int>(threadIdx.x % kWaveSize) % 16; }
__device__ inline int quad() { return static_cast<int>(threadIdx.x % kWaveSize) / 16; }
template <bool kBf16>
__device__ inline void load_a(ATile<kBf16>& a, const std::uint16_t* p, int ld) {
  a.v = *reinterpret_cast<const decltype(a.v)*>(p + lane16() * ld + 4 * quad());
}
template <bool kBf16>
__device__ inline void load_b(BTile<kBf16>& b, const std::uint16_t* p, int ld) {
  load_a<kBf16>(b, p, ld);  // B is stored [column][k]: the same lane pattern as A
}
template <bool kBf16>
__device__ inline void mma(Acc& c, const ATile<kBf16>& a, const BTile<kBf16>& b) {
#if defined(__gfx90a__) || defined(__gfx908__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  if constexpr (kBf16) c.v = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, c.v, 0, 0, 0);
  else c.v = __builtin_amdgcn_mfma_f32_16x16x16f16(a.v, b.v, c.v, 0, 0, 0);
#else
  __builtin_trap();  // never launched: the host checks for matrix cores first
#endif
}
// B [k][column]: lane l gathers B[4(l/16)..+3][l%16] from four rows; the MFMA itself is
// the same, so BTileKN is a distinct type only to pick this load.
template <bool kBf16>
struct BTileKN : ATile<kBf16> {};
template <bool kBf16>
__device__ inline void load_b_kn(BTileKN<kBf16>& b, const std::uint16_t* p, int ld) {
  using E = std::conditional_t<kBf16, short, _Float16>;
  const auto* e = reinterpret_cast<const E*>(p);
  for (int j = 0; j < 4; ++j) b.v[j] = e[(4 * quad() + j) * ld + lane16()];
}
template <bool kBf16>
__device__ inline void mma(Acc& c, const ATile<kBf16>& a, const BTileKN<kBf16>& b) {
  mma<kBf16>(c, a, static_cast<const ATile<kBf16>&>(b));
}
__device__ inline void zero(Acc& c) { c.v = f32x4{0.0f, 0.0f, 0.0f, 0.0f}; }
__device__ inline void store(const Acc& c, float* p, int ld) {
  for (int j = 0; j < 4; ++j) p[(4 * quad() + j) * ld + lane16()] = c.v[j];
}
__device__ inline std::uint16_t bf16_bits_of(unsigned u) {  // as on NVIDIA
  return static_cast<std::uint16_t>((u >> 16) | ((u & 0x7fffffffu) > 0x7f800000u ? 0x0040u : 0u));
}
__device__ inline std::uint16_t bits16(float v, bool bf16) {
  return bf16 ? bf16_bits_of(__float_as_uint(v)) : __builtin_bit_cast(std::uint16_t, static_cast<_Float16>(v));
}
__device__ inline float from_bits16(std::uint16_t b, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<unsigned>(b) << 16) : static_cast<float>(__builtin_bit_cast(_Float16, b));
}
#endif
}  // namespace tdiff::hip::mma

// ---- Asynchronous global -> LDS copies (the GEMM's operand pipeline) --------------------
//   copy16(lds, src, valid)  16 bytes from global memory into LDS (zeros when !valid; src is
//                            then never read), issued without waiting for them
//   commit()                 closes the group of copies issued since the last commit
//   wait<N>()                waits until at most N committed groups are still in flight
// The copies become visible to the other threads of the workgroup after a barrier.
// NVIDIA: cp.async (sm_80+), so the loads of later stages overlap this stage's products.
// AMD: plain 16-byte loads and stores (gfx90a has no asynchronous 16-byte copy into LDS),
// complete when copy16 returns.
//   kOverlaps                whether the copies overlap the work issued after them (false
//                            on AMD: a kernel staging through registers hides more there)
//   kStages                  LDS stages a copy pipeline should cycle through: 4 on NVIDIA
//                            (3 blocks in flight); 2 on AMD, whose copies complete at once
//                            (and whose 64 KiB of LDS per workgroup would not hold 4)
namespace tdiff::hip::async {
#if defined(TDIFF_HIP_NVIDIA)
inline constexpr bool kOverlaps = true;
inline constexpr int kStages = 4;
__device__ inline void copy16(void* lds, const void* src, bool valid) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(lds));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ inline void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#else
inline constexpr bool kOverlaps = false;
inline constexpr int kStages = 2;
__device__ inline void copy16(void* lds, const void* src, bool valid) {
  *static_cast<uint4*>(lds) = valid ? *static_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
}
__device__ inline void commit() {}
template <int N>
__device__ inline void wait() {}
#endif
}  // namespace tdiff::hip::async

#endif  // a GPU compiler
