// Removal of half-written outputs when the process is interrupted (see atomic_write.hpp).
// The signal handler only reads a fixed table and calls unlink(2), which is async-signal-safe.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "ctforge/io.hpp"

namespace ctforge::io {
namespace {

constexpr int k_slots = 64;
constexpr std::size_t k_path_bytes = 4096;

enum : int { k_free = 0, k_filling = 1, k_active = 2 };
char g_paths[k_slots][k_path_bytes];
std::atomic<int> g_state[k_slots];

extern "C" void remove_partial_outputs(int sig) {
  for (int i = 0; i < k_slots; ++i)
    if (g_state[i].load(std::memory_order_acquire) == k_active) ::unlink(g_paths[i]);
  // SA_RESETHAND restored the default action; the signal is blocked while this handler runs,
  // so the re-raised signal terminates the process as soon as the handler returns.
  ::raise(sig);
}

}  // namespace

int register_partial_output(const std::string& path) {
  if (path.empty() || path.size() >= k_path_bytes) return -1;
  for (int i = 0; i < k_slots; ++i) {
    int expected = k_free;
    if (g_state[i].compare_exchange_strong(expected, k_filling, std::memory_order_acq_rel)) {
      std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
      g_state[i].store(k_active, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_partial_output(int slot) {
  if (slot >= 0 && slot < k_slots) g_state[slot].store(k_free, std::memory_order_release);
}

void install_interrupt_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = remove_partial_outputs;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace ctforge::io
