#pragma once
// hipStream_t for launcher headers that plain g++ compiles (no vendor runtime headers): the
// same pointer type the vendor header names, forward-declared. AMD: HIP's
// `typedef struct ihipStream_t* hipStream_t`; NVIDIA: cudaStream_t = CUstream_st*. The NVIDIA
// build defines TDIFF_HIP_NVIDIA for its .hip (CUDA) sources and TDIFF_HIP_NV for every
// target linking tdiff_hip (src/hip/CMakeLists.txt); either selects the CUDA spelling.
// Redeclaring an alias to the same type is legal C++, so this header and hip/vendor.h may
// both be included, in either order.
#if defined(TDIFF_HIP_NVIDIA) || defined(TDIFF_HIP_NV)
struct CUstream_st;
using hipStream_t = CUstream_st*;
#else
struct ihipStream_t;
using hipStream_t = ihipStream_t*;
#endif
