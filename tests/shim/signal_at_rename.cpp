// An LD_PRELOAD library for the interruption tests (tests/io/output_failures_test.cpp): with
// CTFORGE_SIGNAL_AT_RENAME="SIG:N" in the environment, the process raises signal SIG at its
// N-th rename (counted from 0, rename, renameat and renameat2 together), before that rename is
// made. Every output is committed by renames, so N = 0, 1, ... stops a run at each step of its
// commits, deterministically: before the first, between two, ...
#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<int> g_renames{0};

void signal_if_due() {
  const char* spec = std::getenv("CTFORGE_SIGNAL_AT_RENAME");
  int sig = 0, at = -1;
  if (spec == nullptr || std::sscanf(spec, "%d:%d", &sig, &at) != 2) return;
  if (g_renames.fetch_add(1) == at) ::raise(sig);
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int rename(const char* from, const char* to) {
  static const auto real = next<int (*)(const char*, const char*)>("rename");
  signal_if_due();
  return real(from, to);
}

extern "C" int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  static const auto real = next<int (*)(int, const char*, int, const char*)>("renameat");
  signal_if_due();
  return real(from_dir, from, to_dir, to);
}

extern "C" int renameat2(int from_dir, const char* from, int to_dir, const char* to,
                         unsigned flags) {
  static const auto real = next<int (*)(int, const char*, int, const char*, unsigned)>("renameat2");
  signal_if_due();
  return real(from_dir, from, to_dir, to, flags);
}
