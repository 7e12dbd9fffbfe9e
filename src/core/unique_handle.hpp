// A move-only owner of one handle of a C API (plain C++: the API's types come in through the
// traits), in the spirit of std::unique_ptr with a deleter. The CUDA owners (streams, events,
// graphs, cuFFT plans, arrays, texture and surface objects: src/kernels/cuda_raii.cuh) and the
// HDF5 identifiers (src/io/h5.hpp) are thin uses of it.
//
// Traits describe the handle:
//
//   struct traits {
//     using handle_type = ...;                  // a pointer (cudaStream_t) or an integer (hid_t)
//     static handle_type null() noexcept;       // the value get() returns when nothing is owned
//     static void release(handle_type) noexcept;      // frees an owned handle (once)
//     static bool is_null(handle_type) noexcept;      // optional: values that are never owned
//   };                                                //   (default: equal to null())
//
// Ownership is recorded next to the value, so APIs whose valid handles include the null value
// (a cuFFT plan may be 0) are owned correctly: such traits define is_null as always false.
#pragma once

#include <type_traits>
#include <utility>

namespace ctforge::detail {

template <class Traits>
class unique_handle {
 public:
  using handle_type = typename Traits::handle_type;
  using traits_type = Traits;

  /// Owns nothing.
  unique_handle() noexcept = default;
  /// Takes ownership of `h` unless it is a null value (then owns nothing; get() still says `h`).
  explicit unique_handle(handle_type h) noexcept : h_(h), owned_(!is_null(h)) {}
  unique_handle(unique_handle&& o) noexcept
      : h_(std::exchange(o.h_, Traits::null())), owned_(std::exchange(o.owned_, false)) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, Traits::null());
      owned_ = std::exchange(o.owned_, false);
    }
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;
  ~unique_handle() { reset(); }

  handle_type get() const noexcept { return h_; }
  /// Whether a handle is owned.
  bool owns() const noexcept { return owned_; }
  explicit operator bool() const noexcept { return owned_; }

  /// Gives up ownership without releasing; returns the value held (null() when none).
  handle_type release() noexcept {
    owned_ = false;
    return std::exchange(h_, Traits::null());
  }
  /// Releases the owned handle (if any) and owns nothing.
  void reset() noexcept { reset(Traits::null()); }
  /// Releases the owned handle (if any) and takes ownership of `h` (unless null).
  void reset(handle_type h) noexcept {
    const handle_type old = std::exchange(h_, h);
    const bool was_owned = std::exchange(owned_, !is_null(h));
    if (was_owned) Traits::release(old);
  }

  /// Whether `h` is a value that is never owned.
  static bool is_null(handle_type h) noexcept {
    if constexpr (requires { Traits::is_null(h); })
      return Traits::is_null(h);
    else
      return h == Traits::null();
  }

 private:
  handle_type h_ = Traits::null();
  bool owned_ = false;
};

}  // namespace ctforge::detail
