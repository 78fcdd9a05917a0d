// SHARDCHECK_HD marks a function that device code calls too: `__host__ __device__`
// under nvcc, nothing under a host compiler (g++ builds the same source for the CPU
// paths and for Thrust's OpenMP system). A header of its own so that a header with
// device functions need not pull in the scaling arithmetic to get it.
#pragma once

#if defined(__CUDACC__)
#define SHARDCHECK_HD __host__ __device__
#else
#define SHARDCHECK_HD
#endif
