#pragma once
// The one file that names a GPU vendor. Kernels and launchers include this header and use
// only the hip* names below; for the NVIDIA build (TDIFF_HIP_NVIDIA, nvcc) they map to CUDA,
// for the AMD build (hipcc / clang -x hip) this is plain HIP. Debian's HIP 5.2 headers for
// the NVIDIA platform do not compile with CUDA 13, hence this mapping of our own.
#if defined(TDIFF_HIP_NVIDIA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorMemoryAllocation = cudaErrorMemoryAllocation;
inline constexpr auto hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr auto hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr auto hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
inline constexpr unsigned hipEventDisableTiming = cudaEventDisableTiming;

#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
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
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventCreate cudaEventCreate
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime

// Lanes of one wavefront/warp, known at compile time on both sides of the build.
inline constexpr int kWaveSize = 32;
#define TDIFF_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#else
#include <hip/hip_runtime.h>
#if defined(__AMDGCN_WAVEFRONT_SIZE)
inline constexpr int kWaveSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWaveSize = 64;  // host pass of the AMD build: CDNA2 wavefronts
#endif
#define TDIFF_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#endif
