// The CUDA iterative space (src/recon/iterative_space.hpp): every array an iterative algorithm
// touches lives on the device, and one iteration is a sequence of kernels in the space's own
// stream with no host transfer and no allocation.
//
// What the space owns, allocated once at construction (or, for the TV dual fields, at the
// first tv_prox):
//  * its stream (non-blocking; never the legacy default stream);
//  * the per-view ray records (kernels::cuda::fp_view) and back-projection matrices of every
//    subset (and of all views), uploaded once;
//  * the 3D array and texture the forward projector reads: forward() copies the volume buffer
//    into the existing array device to device;
//  * one layered array (a batch of views) and its texture for the voxel-driven back-projector,
//    its constant-memory staging, slab header and batch counter;
//  * the reduction scratch (one double per block and the result, page-locked for the host);
//  * the TV dual fields.
// Buffers handed out by volume() / projections() are allocated as device_buffer (cudaMalloc) and
// released with cudaFree by their space_buffer.
//
// The projector pair runs the CPU path's per-ray and per-voxel arithmetic
// (kernels::joseph_ray_window, joseph_scatter_with, bp_contribution) on device pointers. The
// matched back-projector adds with atomicAdd: its result is the exact transpose of the forward
// projector up to float rounding, but the order of the additions (and so the last bits) may
// change from run to run. The reductions are deterministic: a fixed grid of blocks, each
// summing a fixed share of the elements in double, then one block summing the partial sums in
// a fixed order. The voxel-driven back-projector's matrices live in the process-wide constant
// memory block: back(voxel) holds its lock and waits for its kernels before returning.
//
// There is no slab split: the volume, the largest projection stack and the buffers the
// algorithms need must fit in device memory together (usage_error naming the sizes otherwise).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/iterative_space.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_plan.cuh"
#include "cuda/cuda_raii.cuh"
#include "cuda/joseph_device.cuh"
#include "math/backproject.hpp"
#include "math/cylinder.hpp"
#include "math/elementwise.hpp"
#include "math/tv.hpp"

namespace ctforge::kernels::cuda {
namespace {

using detail::backprojector_kind;
using detail::space_buffer;
using detail::space_config;
using detail::space_stats;

// ---- element-wise kernels (grid-stride loops, 64-bit indices) ------------------------------

constexpr int k_ew_threads = 256;
constexpr std::int64_t k_ew_max_blocks = 8192;

template <class Op>
__global__ void __launch_bounds__(k_ew_threads) elementwise_kernel(std::int64_t n, Op op) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    op(i);
}

template <class Op>
void launch_elementwise(cudaStream_t s, std::int64_t n, const Op& op, const char* what) {
  if (n <= 0) return;
  const std::int64_t blocks =
      std::min<std::int64_t>((n + k_ew_threads - 1) / k_ew_threads, k_ew_max_blocks);
  elementwise_kernel<<<static_cast<unsigned>(blocks), k_ew_threads, 0, s>>>(n, op);
  CTFORGE_CUDA_CHECK_LAUNCH(std::string("launching the ") + what + " kernel");
}

struct op_fill {
  float* x;
  float value;
  __device__ void operator()(std::int64_t i) const { x[i] = value; }
};
struct op_lincomb {  // out may alias x or y: each element reads and writes only index i
  float a;
  const float* x;
  float b;
  const float* y;
  float* out;
  __device__ void operator()(std::int64_t i) const { out[i] = ew_lincomb(a, x[i], b, y[i]); }
};
struct op_invert_above {
  float* x;
  float floor;
  __device__ void operator()(std::int64_t i) const { x[i] = ew_invert_above(x[i], floor); }
};
struct op_weighted_residual {
  const float *w, *p, *q;
  float* out;
  __device__ void operator()(std::int64_t i) const {
    out[i] = ew_weighted_residual(w[i], p[i], q[i]);
  }
};
struct op_weighted_update {
  float* x;
  float lambda;
  const float *c, *u;
  bool nonnegative;
  __device__ void operator()(std::int64_t i) const {
    x[i] = ew_weighted_update(x[i], lambda, c[i], u[i], nonnegative);
  }
};
struct op_clamp_nonnegative {
  float* x;
  __device__ void operator()(std::int64_t i) const { x[i] = ew_clamp_nonnegative(x[i]); }
};
struct op_ratio {
  const float *p, *q;
  float eps;
  float* out;
  __device__ void operator()(std::int64_t i) const { out[i] = ew_ratio(p[i], q[i], eps); }
};
struct op_multiply_ratio {
  float* x;
  const float *u, *s;
  float eps;
  __device__ void operator()(std::int64_t i) const {
    x[i] = ew_multiply_ratio(x[i], u[i], s[i], eps);
  }
};
// TV (kernels/tv.cuh): out may alias b (the final step writes the prox into the input).
struct op_tv_primal {
  const float* b;
  const float *px, *py, *pz;
  tv_dims d;
  float lam;
  bool nonnegative;
  float* out;
  __device__ void operator()(std::int64_t i) const {
    out[i] = tv_primal_at(b, px, py, pz, d, lam, nonnegative, i);
  }
};
struct op_tv_dual {
  const float* z;
  float *rx, *ry, *rz, *px, *py, *pz;
  tv_dims d;
  float lam, momentum;
  __device__ void operator()(std::int64_t i) const {
    tv_dual_at(z, rx, ry, rz, px, py, pz, d, lam, momentum, i);
  }
};

// ---- deterministic reductions in double -----------------------------------------------------

constexpr int k_red_threads = 256;  // power of two
constexpr int k_red_blocks = 1024;  // fixed: the partition depends on n only

template <class Term>
__global__ void __launch_bounds__(k_red_threads)
    reduce_partial_kernel(std::int64_t n, Term term, double* partial) {
  __shared__ double sh[k_red_threads];
  double acc = 0.0;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    acc += term(i);
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int half = k_red_threads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) sh[threadIdx.x] += sh[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void __launch_bounds__(k_red_threads)
    reduce_final_kernel(const double* partial, int n, double* result) {
  __shared__ double sh[k_red_threads];
  double acc = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += k_red_threads) acc += partial[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int half = k_red_threads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) sh[threadIdx.x] += sh[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = sh[0];
}

struct term_dot {
  const float *a, *b;
  __device__ double operator()(std::int64_t i) const { return dot_term(a[i], b[i]); }
};
struct term_tv {
  const float* x;
  tv_dims d;
  __device__ double operator()(std::int64_t i) const { return tv_norm_at(x, d, i); }
};
struct term_poisson {
  const float *p, *q;
  __device__ double operator()(std::int64_t i) const { return poisson_term(p[i], q[i]); }
};

// ---- the space --------------------------------------------------------------------------------

void release_device_buffer(float* p) noexcept {
  warn_on_error(cudaFree(p), "cudaFree (iterative space buffer)");
}

std::string size_text(std::int64_t n) {
  return std::to_string(n) + " values";
}

/// Views s, s + n, s + 2n, ... of V (the interleaved ordered subsets of space_config).
std::vector<std::int64_t> interleaved_views(std::int64_t V, int n, int s) {
  std::vector<std::int64_t> out;
  for (std::int64_t v = s; v < V; v += n) out.push_back(v);
  return out;
}

class cuda_space final : public detail::iterative_space {
 public:
  cuda_space(const geometry& g, const volume_geometry& vg, const space_config& cfg,
             int volume_buffers, int projection_buffers)
      : g_(g), vg_(vg), cfg_(cfg), s_(make_stream(cfg.device)) {
    const device_guard guard(cfg_.device);
    const std::int64_t V = g_.view_count(), R = g_.rows, C = g_.cols;
    subsets_ = static_cast<int>(std::clamp<std::int64_t>(cfg_.subset_count, 1, V));
    all_views_ = interleaved_views(V, 1, 0);
    for (int s = 0; s < subsets_; ++s) subset_views_.push_back(interleaved_views(V, subsets_, s));
    std::int64_t largest = subsets_ == 1 ? V : 0;
    for (const auto& sv : subset_views_)
      largest = std::max<std::int64_t>(largest, static_cast<std::int64_t>(sv.size()));

    // ---- limits ---------------------------------------------------------------------------
    check_joseph_launch_limits(g_, vg_);
    int max3[3] = {0, 0, 0}, max_w = 0, max_h = 0, max_layers = 0;
    const int dev = cfg_.device;
    CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[0], cudaDevAttrMaxTexture3DWidth, dev));
    CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[1], cudaDevAttrMaxTexture3DHeight, dev));
    CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[2], cudaDevAttrMaxTexture3DDepth, dev));
    CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max_w, cudaDevAttrMaxTexture2DLayeredWidth, dev));
    CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max_h, cudaDevAttrMaxTexture2DLayeredHeight, dev));
    CTFORGE_CUDA_TRY(
        cudaDeviceGetAttribute(&max_layers, cudaDevAttrMaxTexture2DLayeredLayers, dev));
    CTFORGE_EXPECTS(vg_.nx <= max3[0] && vg_.ny <= max3[1] && vg_.nz <= max3[2],
                    "CUDA iterative space: a volume of " + std::to_string(vg_.nx) + " x " +
                        std::to_string(vg_.ny) + " x " + std::to_string(vg_.nz) +
                        " voxels exceeds the 3D texture limit (" + std::to_string(max3[0]) + " x " +
                        std::to_string(max3[1]) + " x " + std::to_string(max3[2]) +
                        "); the iterative methods do not split the volume into slabs");
    CTFORGE_EXPECTS(C <= max_w && R <= max_h && R <= 65535,
                    "CUDA iterative space: a detector of " + std::to_string(C) + " x " +
                        std::to_string(R) + " pixels exceeds the layered texture limit (" +
                        std::to_string(max_w) + " x " + std::to_string(std::min(max_h, 65535)) +
                        ")");
    CTFORGE_EXPECTS(
        vg_.nx < (std::int64_t{1} << 31) / 32 && vg_.ny < 65535 * 4 && vg_.nz < 65535 * 8,
        "CUDA iterative space: a volume of " + std::to_string(vg_.nx) + " x " +
            std::to_string(vg_.ny) + " x " + std::to_string(vg_.nz) +
            " voxels exceeds the back-projection launch limits");
    batch_ = static_cast<int>(std::min<std::int64_t>(
        {largest, k_max_batch_views, std::max<std::int64_t>(max_layers, 1)}));

    // ---- memory -----------------------------------------------------------------------------
    const std::int64_t vol_bytes = vg_.voxel_count() * 4;
    const std::int64_t proj_bytes = largest * R * C * 4;
    const std::int64_t layer_bytes = static_cast<std::int64_t>(batch_) * R * C * 4;
    const std::int64_t need =
        vol_bytes * (1 + volume_buffers) + proj_bytes * projection_buffers + layer_bytes +
        V * static_cast<std::int64_t>(sizeof(fp_view) + sizeof(proj_matrix)) * 2 +
        (std::int64_t{4} << 20);
    const std::int64_t budget = device_memory_budget(cfg_.gpu_memory_limit_bytes);
    // What the space's own arrays hold; buffers and TV fields are counted as they are made
    // (make_buffer, ensure_tv_fields), against the same budget, and not uncounted when a
    // buffer is freed (the algorithms keep theirs for the whole run).
    budget_ = budget;
    held_ = need - vol_bytes * volume_buffers - proj_bytes * projection_buffers;
    if (need > budget)
      throw usage_error(
          "CUDA iterative space: the volume (" + format_bytes(vol_bytes) + ", held " +
          std::to_string(1 + volume_buffers) + " times: its texture and " +
          std::to_string(volume_buffers) + " buffers), the projections of " +
          std::to_string(largest) + " views (" + format_bytes(proj_bytes) + ", held " +
          std::to_string(projection_buffers) + " times) and a batch of " + std::to_string(batch_) +
          " views for the back-projector (" + format_bytes(layer_bytes) + ") need " +
          format_bytes(need) + " of device memory; " +
          (cfg_.gpu_memory_limit_bytes > 0 ? "the limit (--gpu-memory-limit) allows "
                                           : "the free device memory allows ") +
          format_bytes(budget) +
          " (the iterative methods keep everything on the device and do not split the volume "
          "into slabs: use more subsets, fewer voxels or the CPU backend)");

    // ---- resources ----------------------------------------------------------------------------
    fp_ = make_fp_params(g_, vg_);
    const bool hw = cfg_.gpu_hardware_interpolation;
    mode_ = hw ? interp::hardware : interp::exact;
    vol_arr_.emplace(cuda_array::kind::volume_3d, vg_.nx, vg_.ny, vg_.nz, false,
                     "the forward projector's volume");
    vol_tex_.emplace(*vol_arr_, hw);
    layers_.emplace(cuda_array::kind::layered_2d, C, R, batch_, false,
                    "the back-projector's batch of views");
    layer_tex_.emplace(*layers_, hw);
    bp_staging_.emplace(1, "back-projection constants");
    slab_.emplace(1, "back-projection slab header");
    counter_.emplace(1, "back-projection batch counter");
    partial_.emplace(static_cast<std::size_t>(k_red_blocks), "reduction partial sums");
    result_.emplace(1, "reduction result");
    result_host_.emplace(1, "reduction result");
    allocations_ += 11;

    // Slab header: the whole volume, every detector row.
    bp_slab_header h{};
    h.nx = static_cast<int>(vg_.nx);
    h.ny = static_cast<int>(vg_.ny);
    h.nz = static_cast<int>(vg_.nz);
    h.cols = static_cast<int>(C);
    h.rows_valid = static_cast<int>(R);
    h.row_offset = 0;
    h.ox = static_cast<float>(vg_.origin_mm[0]);
    h.oy = static_cast<float>(vg_.origin_mm[1]);
    h.oz = static_cast<float>(vg_.origin_mm[2]);
    h.sx = static_cast<float>(vg_.spacing_mm[0]);
    h.sy = static_cast<float>(vg_.spacing_mm[1]);
    h.sz = static_cast<float>(vg_.spacing_mm[2]);
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(slab_->data(), &h, sizeof h, cudaMemcpyHostToDevice, s_),
                     "uploading the back-projection slab header");

    // Per-view geometry of all views and of every subset, uploaded once.
    std::vector<proj_matrix> mats(static_cast<std::size_t>(V));
    if (g_.curved())
      shifted_cyl_maps(cylinder_maps_d(g_), 0, mats.data());
    else
      shifted_matrices(compute_projection_matrices(g_), 0, mats.data());
    sets_.push_back(make_view_set(all_views_, mats));
    for (const auto& sv : subset_views_) sets_.push_back(make_view_set(sv, mats));
    s_.synchronize("uploading the iterative space's geometry");  // host vectors go out of scope
  }

  ~cuda_space() override {
    // Work still queued reads the buffers about to be freed.
    if (s_.get()) warn_on_error(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
  }

  backend where() const override { return backend::cuda; }
  const geometry& geom() const override { return g_; }
  const volume_geometry& grid() const override { return vg_; }
  int subset_count() const override { return subsets_; }
  const std::vector<std::int64_t>& views_of(int subset) const override {
    check_subset(subset);
    return subset < 0 ? all_views_ : subset_views_[static_cast<std::size_t>(subset)];
  }

  // ---- buffers ------------------------------------------------------------------------------
  space_buffer volume() override { return make_buffer(vg_.voxel_count(), "a volume buffer"); }
  space_buffer projections(int subset) override {
    return make_buffer(projection_size(subset), "a projection buffer");
  }
  void upload(std::span<const float> host, space_buffer& dst) override {
    check_size("upload", dst, static_cast<std::int64_t>(host.size()), "the host data");
    const device_guard guard(cfg_.device);
    const std::size_t bytes = host.size() * sizeof(float);
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(dst.data(), host.data(), bytes, cudaMemcpyHostToDevice, s_),
                     "uploading " + format_bytes(static_cast<std::int64_t>(bytes)));
    s_.synchronize("uploading into the iterative space");  // the host span may go away
    stats_.bytes_uploaded += static_cast<std::int64_t>(bytes);
  }
  void download(const space_buffer& src, std::span<float> host) override {
    check_size("download", src, static_cast<std::int64_t>(host.size()), "the host span");
    const device_guard guard(cfg_.device);
    const std::size_t bytes = host.size() * sizeof(float);
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(host.data(), src.data(), bytes, cudaMemcpyDeviceToHost, s_),
                     "downloading " + format_bytes(static_cast<std::int64_t>(bytes)));
    s_.synchronize("downloading from the iterative space");
    stats_.bytes_downloaded += static_cast<std::int64_t>(bytes);
  }

  // ---- the projector pair ---------------------------------------------------------------------
  void forward(const space_buffer& x, space_buffer& y, int subset) override {
    check_size("forward", x, vg_.voxel_count(), "the volume");
    check_size("forward", y, projection_size(subset), "the projections of the subset");
    const device_guard guard(cfg_.device);
    const view_set& vs = set_of(subset);
    // Kernels earlier in the stream finish reading the array before it is overwritten.
    const cudaMemcpy3DParms cp =
        vol_arr_->copy_from(x.data(), static_cast<std::size_t>(vg_.nx) * sizeof(float), vg_.nx,
                            vg_.ny, vg_.nz, 0, cudaMemcpyDeviceToDevice);
    CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s_), "copying the volume into the forward texture");
    enqueue_forward_projection(s_, mode_, vol_tex_->get(), vs.rays.data(), fp_, 0, vs.count,
                               y.data());
    ++stats_.forward_calls;
  }

  void back(const space_buffer& y, space_buffer& x, int subset, backprojector_kind kind) override {
    check_size("back", y, projection_size(subset), "the projections of the subset");
    check_size("back", x, vg_.voxel_count(), "the volume");
    const device_guard guard(cfg_.device);
    const view_set& vs = set_of(subset);
    CTFORGE_CUDA_TRY(cudaMemsetAsync(x.data(), 0, static_cast<std::size_t>(x.size()) * 4, s_),
                     "clearing the back-projection's volume");
    if (kind == backprojector_kind::matched) {
      enqueue_matched_backprojection(s_, vs.rays.data(), fp_, vs.count, y.data(), x.data());
    } else {
      const std::int64_t R = g_.rows, C = g_.cols;
      const std::lock_guard<std::mutex> lock(backprojection_constants_mutex());
      CTFORGE_CUDA_TRY(cudaMemsetAsync(counter_->data(), 0, sizeof(int), s_),
                       "resetting the back-projection batch counter");
      bp_sources src{};
      src.slab = slab_->data();
      src.matrices = vs.mats.data();
      src.counter = counter_->data();
      src.staging = bp_staging_->data();
      src.views_per_batch = batch_;
      src.total_views = static_cast<int>(vs.count);
      for (std::int64_t v0 = 0; v0 < vs.count; v0 += batch_) {
        const std::int64_t n = std::min<std::int64_t>(batch_, vs.count - v0);
        const cudaMemcpy3DParms cp =
            layers_->copy_from(y.data() + v0 * R * C, static_cast<std::size_t>(C) * sizeof(float),
                               C, R, n, 0, cudaMemcpyDeviceToDevice);
        CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s_), "copying views " + std::to_string(v0) + ".." +
                                                         std::to_string(v0 + n - 1) +
                                                         " into the back-projector's texture");
        enqueue_backprojection(s_, bp_weighting::none, mode_, src, layer_tex_->get(),
                               layer_tex_->get(), x.data(), static_cast<int>(vg_.nx),
                               static_cast<int>(vg_.ny), static_cast<int>(vg_.nz), g_.curved());
        enqueue_bump(s_, counter_->data());
      }
      // The constant block is shared with every other back-projection in the process.
      s_.synchronize("back-projecting (voxel-driven)");
    }
    ++stats_.back_calls;
  }

  // ---- element-wise steps -----------------------------------------------------------------------
  void fill(space_buffer& x, float value) override {
    if (x.size() == 0) return;  // as on the CPU
    check_nonempty("fill", x);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, x.size(), op_fill{x.data(), value}, "fill");
  }
  void copy(const space_buffer& src, space_buffer& dst) override {
    check_same("copy", src, dst);
    if (src.data() == dst.data()) return;  // as on the CPU (overlapping memcpy is undefined)
    const device_guard guard(cfg_.device);
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(src.size()) * 4,
                        cudaMemcpyDeviceToDevice, s_),
        "copying a buffer");
  }
  void axpby(float a, const space_buffer& x, float b, space_buffer& y) override {
    check_same("axpby", x, y);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, y.size(), op_lincomb{a, x.data(), b, y.data(), y.data()}, "axpby");
  }
  void lincomb(float a, const space_buffer& x, float b, const space_buffer& y,
               space_buffer& out) override {
    check_same("lincomb", x, y);
    check_same("lincomb", x, out);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, out.size(), op_lincomb{a, x.data(), b, y.data(), out.data()}, "lincomb");
  }
  void invert_above(space_buffer& x, float floor) override {
    if (x.size() == 0) return;  // as on the CPU
    check_nonempty("invert_above", x);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, x.size(), op_invert_above{x.data(), floor}, "invert_above");
  }
  void weighted_residual(const space_buffer& w, const space_buffer& p, const space_buffer& q,
                         space_buffer& out) override {
    check_same("weighted_residual", w, p);
    check_same("weighted_residual", w, q);
    check_same("weighted_residual", w, out);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, out.size(),
                       op_weighted_residual{w.data(), p.data(), q.data(), out.data()},
                       "weighted_residual");
  }
  void weighted_update(space_buffer& x, float lambda, const space_buffer& c, const space_buffer& u,
                       bool nonnegative) override {
    check_same("weighted_update", x, c);
    check_same("weighted_update", x, u);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, x.size(),
                       op_weighted_update{x.data(), lambda, c.data(), u.data(), nonnegative},
                       "weighted_update");
  }
  void clamp_nonnegative(space_buffer& x) override {
    if (x.size() == 0) return;  // as on the CPU
    check_nonempty("clamp_nonnegative", x);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, x.size(), op_clamp_nonnegative{x.data()}, "clamp_nonnegative");
  }
  void ratio(const space_buffer& p, const space_buffer& q, float eps, space_buffer& out) override {
    check_same("ratio", p, q);
    check_same("ratio", p, out);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, out.size(), op_ratio{p.data(), q.data(), eps, out.data()}, "ratio");
  }
  void multiply_ratio(space_buffer& x, const space_buffer& u, const space_buffer& s,
                      float eps) override {
    check_same("multiply_ratio", x, u);
    check_same("multiply_ratio", x, s);
    const device_guard guard(cfg_.device);
    launch_elementwise(s_, x.size(), op_multiply_ratio{x.data(), u.data(), s.data(), eps},
                       "multiply_ratio");
  }

  // ---- reductions -------------------------------------------------------------------------------
  double dot(const space_buffer& a, const space_buffer& b) override {
    check_same("dot", a, b);
    return reduce(a.size(), term_dot{a.data(), b.data()}, "dot");
  }
  double total_variation(const space_buffer& x) override {
    CTFORGE_EXPECTS(x.size() == vg_.voxel_count(), "total_variation: not a volume buffer");
    return reduce(x.size(), term_tv{x.data(), tv_dims{vg_.nx, vg_.ny, vg_.nz}}, "total variation");
  }
  double poisson_log_likelihood(const space_buffer& p, const space_buffer& q) override {
    check_same("poisson_log_likelihood", p, q);
    return reduce(p.size(), term_poisson{p.data(), q.data()}, "poisson_log_likelihood");
  }

  // ---- total variation --------------------------------------------------------------------------
  void tv_prox(space_buffer& x, float weight, int iterations, bool nonnegative) override {
    check_size("tv_prox", x, vg_.voxel_count(), "the volume");
    CTFORGE_EXPECTS(
        std::isfinite(weight) && weight >= 0.0f,
        "tv_prox: the weight must be finite and >= 0 (got " + std::to_string(weight) + ")");
    CTFORGE_EXPECTS(iterations >= 0,
                    "tv_prox: iterations must be >= 0 (got " + std::to_string(iterations) + ")");
    const device_guard guard(cfg_.device);
    const std::int64_t n = x.size();
    if (weight == 0.0f || iterations == 0) {  // the prox of a zero weight is the identity
      if (nonnegative) launch_elementwise(s_, n, op_clamp_nonnegative{x.data()}, "tv_prox clamp");
      return;
    }
    const tv_dims d{vg_.nx, vg_.ny, vg_.nz};
    const bool three = d.nz > 1;
    ensure_tv_fields(three);
    float* z = tv_[0].data();
    float *rx = tv_[1].data(), *ry = tv_[2].data(), *px = tv_[3].data(), *py = tv_[4].data();
    float* rz = three ? tv_[5].data() : nullptr;
    float* pz = three ? tv_[6].data() : nullptr;
    for (std::size_t k = 1; k < tv_.size(); ++k)
      CTFORGE_CUDA_TRY(cudaMemsetAsync(tv_[k].data(), 0, tv_[k].bytes(), s_),
                       "clearing the TV dual fields");
    double t = 1.0;
    for (int it = 0; it < iterations; ++it) {
      // z = P_C(b - lam div r), with b = x (x is only written by the final step).
      launch_elementwise(s_, n, op_tv_primal{x.data(), rx, ry, rz, d, weight, nonnegative, z},
                         "tv_prox primal");
      const double t_next = tv_next_t(t);
      const float momentum = static_cast<float>((t - 1.0) / t_next);
      launch_elementwise(s_, n, op_tv_dual{z, rx, ry, rz, px, py, pz, d, weight, momentum},
                         "tv_prox dual");
      t = t_next;
    }
    // x = P_C(x - lam div p): each voxel reads x only at its own index.
    launch_elementwise(s_, n, op_tv_primal{x.data(), px, py, pz, d, weight, nonnegative, x.data()},
                       "tv_prox result");
  }

  space_stats stats() const override { return stats_; }
  std::int64_t resource_allocations() const override { return allocations_; }

 private:
  struct view_set {
    device_buffer<fp_view> rays;
    device_buffer<proj_matrix> mats;
    std::int64_t count = 0;
  };

  static stream make_stream(int device) {
    detail::require_cuda_device(device);
    const device_guard guard(device);
    return stream(0);
  }

  view_set make_view_set(const std::vector<std::int64_t>& views,
                         const std::vector<proj_matrix>& all_mats) {
    const std::vector<fp_view> rays = make_fp_views(g_, views);
    std::vector<proj_matrix> mats(views.size());
    for (std::size_t i = 0; i < views.size(); ++i)
      mats[i] = all_mats[static_cast<std::size_t>(views[i])];
    view_set vs{device_buffer<fp_view>(rays.size(), "the rays' view geometry"),
                device_buffer<proj_matrix>(mats.size(), "the back-projection matrices"),
                static_cast<std::int64_t>(views.size())};
    allocations_ += 2;
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(vs.rays.data(), rays.data(), vs.rays.bytes(), cudaMemcpyHostToDevice, s_),
        "uploading the rays' view geometry");
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(vs.mats.data(), mats.data(), vs.mats.bytes(), cudaMemcpyHostToDevice, s_),
        "uploading the back-projection matrices");
    s_.synchronize("uploading the view geometry");  // the host vectors go out of scope
    return vs;
  }

  void ensure_tv_fields(bool three) {
    const std::size_t want = three ? 7 : 5;  // z, rx, ry, px, py (, rz, pz)
    if (tv_.size() >= want) return;
    const std::int64_t bytes = vg_.voxel_count() * 4;
    const std::int64_t need = bytes * static_cast<std::int64_t>(want - tv_.size());
    reserve(need, "the TV step's " + std::to_string(want) + " volume-sized fields");
    while (tv_.size() < want) {
      tv_.emplace_back(static_cast<std::size_t>(vg_.voxel_count()), "a TV dual field");
      ++allocations_;
    }
  }

  template <class Term>
  double reduce(std::int64_t n, const Term& term, const char* what) {
    const device_guard guard(cfg_.device);
    reduce_partial_kernel<<<k_red_blocks, k_red_threads, 0, s_>>>(n, term, partial_->data());
    CTFORGE_CUDA_CHECK_LAUNCH(std::string("launching the ") + what + " reduction");
    reduce_final_kernel<<<1, k_red_threads, 0, s_>>>(partial_->data(), k_red_blocks,
                                                     result_->data());
    CTFORGE_CUDA_CHECK_LAUNCH(std::string("launching the ") + what + " final reduction");
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(result_host_->data(), result_->data(), sizeof(double),
                                     cudaMemcpyDeviceToHost, s_),
                     std::string("reading the ") + what + " result");
    s_.synchronize(std::string("computing ") + what);
    return *result_host_->data();
  }

  /// Counts `bytes` more of device memory held by this space: usage_error naming `what` and the
  /// sizes when they would exceed the budget (--gpu-memory-limit, or the free memory when the
  /// space was made), before anything is allocated.
  void reserve(std::int64_t bytes, const std::string& what) {
    if (held_ + bytes > budget_)
      throw usage_error(
          "CUDA iterative space: " + what + " (" + format_bytes(bytes) +
          ") would bring the device memory this reconstruction holds to " +
          format_bytes(held_ + bytes) + ", over " +
          (cfg_.gpu_memory_limit_bytes > 0 ? "the limit (--gpu-memory-limit) of "
                                           : "the free device memory of ") +
          format_bytes(budget_) +
          " (the iterative methods keep everything on the device and do not split the volume "
          "into slabs: use fewer voxels or subsets, or the CPU backend)");
    held_ += bytes;
  }

  space_buffer make_buffer(std::int64_t n, const char* what) {
    const device_guard guard(cfg_.device);
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
    reserve(static_cast<std::int64_t>(bytes), what);
    // Freed by the space_buffer (release_device_buffer: cudaFree) from here on.
    float* p = device_buffer<float>(static_cast<std::size_t>(n), what).release_ownership();
    space_buffer b(p, n, &release_device_buffer);
    CTFORGE_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, s_), std::string("zeroing ") + what);
    ++stats_.buffers_allocated;
    ++allocations_;
    return b;
  }

  void check_subset(int subset) const {
    CTFORGE_EXPECTS(subset >= -1 && subset < subsets_,
                    "iterative space: subset " + std::to_string(subset) +
                        " out of range (-1 or 0.." + std::to_string(subsets_ - 1) + ")");
  }
  const view_set& set_of(int subset) const {
    check_subset(subset);
    return sets_[static_cast<std::size_t>(subset + 1)];
  }
  std::int64_t projection_size(int subset) const {
    return static_cast<std::int64_t>(views_of(subset).size()) * g_.rows * g_.cols;
  }
  static void check_size(const char* op, const space_buffer& b, std::int64_t expected,
                         const char* what) {
    CTFORGE_EXPECTS(b.data() != nullptr && b.size() == expected,
                    std::string(op) + ": the buffer holds " + size_text(b.size()) + " but " + what +
                        " has " + size_text(expected));
  }
  static void check_nonempty(const char* op, const space_buffer& b) {
    CTFORGE_EXPECTS(b.data() != nullptr && b.size() > 0, std::string(op) + ": an empty buffer");
  }
  static void check_same(const char* op, const space_buffer& a, const space_buffer& b) {
    check_nonempty(op, a);
    CTFORGE_EXPECTS(b.data() != nullptr && a.size() == b.size(),
                    std::string(op) + ": buffers of " + size_text(a.size()) + " and " +
                        size_text(b.size()) + " (sizes must be equal)");
  }

  geometry g_;
  volume_geometry vg_;
  space_config cfg_;
  stream s_;  // destroyed last: the destructor waits for it before anything is freed
  int subsets_ = 1;
  std::vector<std::int64_t> all_views_;
  std::vector<std::vector<std::int64_t>> subset_views_;
  int batch_ = 1;
  interp mode_ = interp::exact;
  fp_params fp_{};
  std::optional<cuda_array> vol_arr_;
  std::optional<texture_object> vol_tex_;
  std::optional<cuda_array> layers_;
  std::optional<texture_object> layer_tex_;
  std::optional<device_buffer<bp_constants>> bp_staging_;
  std::optional<device_buffer<bp_slab_header>> slab_;
  std::optional<device_buffer<int>> counter_;
  std::optional<device_buffer<double>> partial_, result_;
  std::optional<pinned_buffer<double>> result_host_;
  std::vector<view_set> sets_;  // [0]: all views; [s + 1]: subset s
  std::vector<device_buffer<float>> tv_;
  space_stats stats_;
  std::int64_t allocations_ = 0;
  std::int64_t budget_ = 0;  // device memory this space may hold (bytes)
  std::int64_t held_ = 0;    // device memory it holds (bytes; its arrays estimated)
};

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

std::unique_ptr<iterative_space> cuda_make_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg, int volume_buffers,
                                                 int projection_buffers) {
  g.validate();
  vg.validate();
  CTFORGE_EXPECTS(cfg.where == backend::cuda,
                  "make_cuda_space: the configuration selects another backend");
  CTFORGE_EXPECTS(volume_buffers >= 0 && projection_buffers >= 0,
                  "CUDA iterative space: negative buffer counts");
  return std::make_unique<kernels::cuda::cuda_space>(g, vg, cfg, volume_buffers,
                                                     projection_buffers);
}

std::unique_ptr<iterative_space> make_cuda_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg) {
  // SIRT / OS-SART / CGLS / FISTA / OSEM hold at most about four volumes and three projection
  // stacks of a subset besides the space's own arrays (the TV fields are planned at first use).
  return cuda_make_space(g, vg, cfg, 4, 3);
}

}  // namespace ctforge::detail
