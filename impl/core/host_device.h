// SHARDREC_HD marks small inline functions shared by the CPU kernels and their CUDA twins: compiled
// for host and device under nvcc, plain inline functions elsewhere.
#pragma once

#if defined(__CUDACC__)
#define SHARDREC_HD __host__ __device__ __forceinline__
#else
#define SHARDREC_HD inline
#endif
