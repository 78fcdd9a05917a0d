// How many threads "threads" asks for, in core's one convention (ConvertOptions::threads,
// CheckOptions::threads): a positive count is taken as given, 0 is what OpenMP offers
// (OMP_NUM_THREADS or the cores). Internal to core.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace shardcheck {

inline int available_threads(int threads) {
#ifdef _OPENMP
  return threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

}  // namespace shardcheck
