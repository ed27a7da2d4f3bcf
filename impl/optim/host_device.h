// SHARDREC_HD marks small inline functions that the CPU kernels and the future CUDA kernels share.
#pragma once

#if defined(__CUDACC__)
#define SHARDREC_HD __host__ __device__ __forceinline__
#else
#define SHARDREC_HD inline
#endif
