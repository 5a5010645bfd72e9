#include "core/sched.h"

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace edgelm {

#if defined(__linux__) && defined(SYS_sched_setattr)
namespace {
// The kernel's struct sched_attr, first version (48 bytes): glibc 2.36
// declares no wrapper for it.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};
static_assert(sizeof(SchedAttr) == 48);
}  // namespace

bool request_short_slice(uint64_t slice_ns) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return false;
  // Only for the normal policy: a real-time or idle thread keeps its own.
  if (sched_getscheduler(0) != SCHED_OTHER) return false;
  SchedAttr a{};
  a.size = sizeof(a);
  a.sched_policy = SCHED_OTHER;
  a.sched_nice = nice;
  a.sched_runtime = slice_ns;
  return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
}
#else
bool request_short_slice(uint64_t) { return false; }
#endif

}  // namespace edgelm
