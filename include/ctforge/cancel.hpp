// Cooperative cancellation of long calls (reconstruct): another thread, a signal handler of
// the caller's or a progress callback requests it; the call stops at its next check point
// (after a batch of views, a slab or an iteration), releases everything it holds and throws
// ctforge::cancelled. Nothing is written by a cancelled call.
#pragma once

#include <atomic>
#include <memory>

#include "ctforge/error.hpp"

namespace ctforge {

/// Thrown by a call whose cancellation_token was requested. Derives from error (exit status 1
/// in the command line).
class cancelled : public error {
 public:
  using error::error;
};

/// Shared flag: copies refer to the same state, so a caller keeps one copy and hands another
/// to the call (in recon_options). request() is async-signal-safe (a lock-free atomic store).
class cancellation_token {
 public:
  cancellation_token() : flag_(std::make_shared<std::atomic<bool>>(false)) {}
  void request() const noexcept { flag_->store(true, std::memory_order_relaxed); }
  void reset() const noexcept { flag_->store(false, std::memory_order_relaxed); }
  bool requested() const noexcept { return flag_->load(std::memory_order_relaxed); }
  /// Throws cancelled("<what>: cancelled") when requested.
  void throw_if_requested(const char* what = "reconstruction") const {
    if (requested()) throw cancelled(std::string(what) + ": cancelled");
  }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
};

}  // namespace ctforge
