// Short CPU time slices for threads whose work is small and waited on.
#pragma once

#include <cstdint>

namespace edgelm {

// Asks the scheduler to run the calling thread in short time slices
// (Linux 6.12 and later: EEVDF takes sched_attr.sched_runtime of a
// SCHED_OTHER thread as the slice it asks for). A waking thread with a
// shorter slice than the running one may preempt it, so a small job (an
// HTTP reply, a refusal, a load generator's request) does not wait out the
// slice of an engine thread that keeps both cores busy. The thread keeps
// its nice value. Kernels before 6.12 ignore the request, which is
// harmless; returns whether the call was accepted.
bool request_short_slice(uint64_t slice_ns = 100'000);

}  // namespace edgelm
