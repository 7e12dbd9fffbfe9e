// Start-up guard for LLVM's OpenMP runtime (libomp, the runtime of clang builds).
//
// libomp registers each process as /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> in its first
// parallel region and removes the file only at a normal exit. A process killed while registering
// leaves the file empty, and libomp 14 then dies of SIGBUS in whichever later process is given
// the same pid, reading the empty file before any of that process's own code can report an
// error. Pids are reused (Linux's default pid_max is 32768), so on a machine where runs are
// killed (spot instances, batch time limits) any later ctforge process could hit it. An empty
// registration under this process's own pid cannot belong to a running process, so it is removed
// before main(). Registrations are left alone otherwise; with GCC's runtime there are none.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace ctforge::detail {
namespace {

__attribute__((constructor)) void drop_empty_openmp_registration() {
#if defined(__linux__)
  char name[96];
  std::snprintf(name, sizeof name, "/dev/shm/__KMP_REGISTERED_LIB_%ld_%ld",
                static_cast<long>(::getpid()), static_cast<long>(::getuid()));
  struct stat st {};
  if (::stat(name, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) ::unlink(name);
#endif
}

}  // namespace

/// Referenced from error.cpp, which every binary using the library links, so that static links
/// keep this file (and its constructor).
extern const int openmp_runtime_guard = 1;

}  // namespace ctforge::detail
