// WS_HD marks a function callable from host code and, when the file is compiled by nvcc, from
// device code: the element-wise working-state arithmetic (philox.h, element_codec.h) is shared bit
// for bit between the CPU reference and the CUDA kernels by including the same header in both.
#pragma once

#if defined(__CUDACC__)
#define WS_HD __host__ __device__ __forceinline__
#else
#define WS_HD inline
#endif
