// The space the iterative algorithms (SIRT, OS-SART, CGLS, FISTA-TV, OSEM) run in: volumes and
// projection stacks held by one backend, the projector pair between them, and the element-wise
// steps the algorithms are made of. The algorithms (src/recon/iterative/*.cpp) are written once
// against this interface; the CPU space holds host arrays and runs the CPU projectors, the CUDA
// space holds device arrays and keeps every iteration on the device (no PCIe traffic per
// iteration beyond scalars, no allocation per iteration once the buffers exist).
//
// Conventions:
//  * A volume buffer holds vg.voxel_count() floats, [z][y][x]. A projection buffer of subset s
//    holds views_of(s).size() * rows * cols floats, [view][row][col], its views in the order
//    views_of(s) lists them. Subset -1 means every view, in the geometry's order.
//  * All element-wise operations take buffers of equal size (checked, usage_error otherwise)
//    and may alias where noted. Reductions accumulate in double and are deterministic for a
//    given backend and thread count (fixed partition, fixed combination order).
//  * Every call is synchronous with respect to the caller's view of the data: after it returns
//    the result may be downloaded or used by the next call (the CUDA space orders its work on
//    its own stream; download() and the reductions synchronise that stream).
//
// The interface lives in core so that both backends implement it from their own floor: the
// CPU space in src/recon/, the CUDA space in src/cuda/. The factories are declared in
// src/recon/iterative_space.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/execution.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Which back-projector an iterative algorithm uses: voxel-driven (fast, the adjoint only up to
/// the interpolation models) or matched (the exact transpose of the Joseph forward projector).
enum class backprojector_kind { voxel, matched };

/// A float array owned by an iterative_space: host memory on the CPU, device memory on CUDA.
/// Move-only; releases its memory through the deleter its space gave it.
class space_buffer {
 public:
  using deleter = void (*)(float*) noexcept;
  space_buffer() = default;
  space_buffer(float* data, std::int64_t size, deleter release) noexcept
      : data_(data), size_(size), release_(release) {}
  space_buffer(space_buffer&& o) noexcept
      : data_(o.data_), size_(o.size_), release_(o.release_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  space_buffer& operator=(space_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = o.data_;
      size_ = o.size_;
      release_ = o.release_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  space_buffer(const space_buffer&) = delete;
  space_buffer& operator=(const space_buffer&) = delete;
  ~space_buffer() { reset(); }

  /// Host or device pointer, depending on the space that made the buffer.
  float* data() const noexcept { return data_; }
  std::int64_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  void reset() noexcept {
    if (data_ && release_) release_(data_);
    data_ = nullptr;
    size_ = 0;
  }
  float* data_ = nullptr;
  std::int64_t size_ = 0;
  deleter release_ = nullptr;
};

/// What an iterative_space is built for.
/// What an iterative_space is built for: where (already resolved to cpu or cuda), device,
/// threads, GPU memory limit and interpolation from the execution context.
struct space_config : execution_context {
  /// Ordered subsets of views (OS-SART, OSEM): subset s holds views s, s + n, s + 2n, ... of
  /// the geometry (n = subset_count, interleaved so each subset spans the whole orbit). 1 = no
  /// subsets. Clamped to the view count.
  int subset_count = 1;
};

/// Counters the tests use to check that iterations neither allocate nor copy across PCIe.
struct space_stats {
  std::int64_t buffers_allocated = 0;  ///< buffers made so far (volume() / projections())
  std::int64_t bytes_uploaded = 0;     ///< host -> space bytes (upload())
  std::int64_t bytes_downloaded = 0;   ///< space -> host bytes (download())
  std::int64_t forward_calls = 0, back_calls = 0;
};

class iterative_space {
 public:
  virtual ~iterative_space() = default;

  virtual backend where() const = 0;
  virtual const geometry& geom() const = 0;
  virtual const volume_geometry& grid() const = 0;
  virtual int subset_count() const = 0;
  /// The geometry's view indices in subset s (-1: all views, in order).
  virtual const std::vector<std::int64_t>& views_of(int subset) const = 0;

  // -- buffers -------------------------------------------------------------------------------
  /// A zero-filled volume buffer.
  virtual space_buffer volume() = 0;
  /// A zero-filled projection buffer of subset s (-1: all views).
  virtual space_buffer projections(int subset) = 0;
  /// Copies host data into dst (sizes equal).
  virtual void upload(std::span<const float> host, space_buffer& dst) = 0;
  /// Copies src into host memory (sizes equal); synchronises.
  virtual void download(const space_buffer& src, std::span<float> host) = 0;

  // -- the projector pair ----------------------------------------------------------------------
  /// y = A_s x: Joseph forward projection of the volume x onto the views of subset s.
  virtual void forward(const space_buffer& x, space_buffer& y, int subset) = 0;
  /// x = B_s y: back-projection of subset s's views into the volume (overwrites x). kind
  /// matched: the exact transpose of forward(); voxel: the voxel-driven back-projector.
  virtual void back(const space_buffer& y, space_buffer& x, int subset,
                    backprojector_kind kind) = 0;

  // -- element-wise steps (n = size of the buffers) -------------------------------------------
  virtual void fill(space_buffer& x, float value) = 0;
  virtual void copy(const space_buffer& src, space_buffer& dst) = 0;
  /// y = a x + b y
  virtual void axpby(float a, const space_buffer& x, float b, space_buffer& y) = 0;
  /// out = a x + b y (out may alias x or y)
  virtual void lincomb(float a, const space_buffer& x, float b, const space_buffer& y,
                       space_buffer& out) = 0;
  /// x = 1 / x where x > floor, else 0 (the SIRT / SART weights R and C)
  virtual void invert_above(space_buffer& x, float floor) = 0;
  /// out = w * (p - q) (out may alias q)
  virtual void weighted_residual(const space_buffer& w, const space_buffer& p,
                                 const space_buffer& q, space_buffer& out) = 0;
  /// x = x + lambda * c * u, then max(x, 0) when nonnegative
  virtual void weighted_update(space_buffer& x, float lambda, const space_buffer& c,
                               const space_buffer& u, bool nonnegative) = 0;
  /// x = max(x, 0)
  virtual void clamp_nonnegative(space_buffer& x) = 0;
  /// out = p / q where q > eps, else 0 (the OSEM ratio; out may alias q)
  virtual void ratio(const space_buffer& p, const space_buffer& q, float eps,
                     space_buffer& out) = 0;
  /// x = x * u / s where s > eps, else x unchanged (the OSEM update)
  virtual void multiply_ratio(space_buffer& x, const space_buffer& u, const space_buffer& s,
                              float eps) = 0;

  // -- reductions (double, synchronise) --------------------------------------------------------
  virtual double dot(const space_buffer& a, const space_buffer& b) = 0;
  /// sum over i of p_i log(q_i) - q_i over q_i > 0 (p_i log q_i taken as 0 where p_i == 0);
  /// -inf where some q_i <= 0 has p_i > 0. The Poisson log-likelihood up to a constant.
  virtual double poisson_log_likelihood(const space_buffer& p, const space_buffer& q) = 0;

  // -- total variation -------------------------------------------------------------------------
  /// x = argmin_z 0.5 |z - x|^2 + weight * TV(z) (isotropic TV over the volume's 3 axes, or 2
  /// for nz == 1, forward differences, Neumann boundary), approximated by `iterations` steps of
  /// the fast gradient projection (FGP) on the dual; then max(x, 0) when nonnegative. weight
  /// in units of the volume's values times voxels.
  virtual void tv_prox(space_buffer& x, float weight, int iterations, bool nonnegative) = 0;

  /// TV(x) = sum over voxels of |grad x| (kernels::tv_norm_at: the isotropic TV tv_prox
  /// penalises), in double: the FISTA-TV objective's penalty. Both spaces reduce it where the
  /// buffer lies.
  virtual double total_variation(const space_buffer& x) = 0;

  /// Whether a saved state is to be read from the space array by array by the saver
  /// (iterative_state::read) rather than downloaded whole first: a space whose buffers are
  /// not in this process (a partitioned run whose parts hold the volumes).
  virtual bool stream_state() const { return false; }
  /// Whether the method's result x stays where it is (the parts of a partitioned run wrote it
  /// into the output): then iterative_run::result returns a volume with no data.
  virtual bool keep_result(const space_buffer& x) {
    (void)x;
    return false;
  }

  virtual space_stats stats() const = 0;
  /// Every allocation the space has made so far: its buffers and, on CUDA, its device arrays,
  /// textures, geometry, scratch and TV fields. Constant across a sequence of operations once
  /// the buffers it uses exist (the tests' check that iterations allocate nothing).
  virtual std::int64_t resource_allocations() const { return stats().buffers_allocated; }
};

}  // namespace ctforge::detail
