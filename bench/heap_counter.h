// Heap bytes in use by the benchmark process, for the extra-memory counters: every
// allocation through operator new is counted (scratch, records, plans, vectors of
// pieces). Tensors of 2 MiB and more come from the tensor allocator, not operator new:
// in a conversion they are its outputs, which are not extra.
#pragma once

#include <cstddef>

namespace shardcheck::bench {

// False where the counter is not installed (under AddressSanitizer, which owns
// operator new); the counters are then not reported.
bool heap_counter_installed();

std::size_t heap_bytes_in_use();

// Starts a new peak at the bytes in use now; heap_peak_bytes() is the highest since.
void reset_heap_peak();
std::size_t heap_peak_bytes();

}  // namespace shardcheck::bench
