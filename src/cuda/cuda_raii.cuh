// Move-only owners of CUDA resources (CUDA translation units only). No default construction:
// every object owns a live resource from construction until destruction or move. The handles
// (streams, events, graphs, cuFFT plans, arrays, texture and surface objects, page-locked
// memory) are each a detail::unique_handle (core/unique_handle.hpp) with the traits below, so
// their move and release are written once; device_buffer adds its size, stream and allocator.
// Destructors never throw; a failure there is reported on stderr.
//
// Allocation happens during set-up only, never inside stream capture or the per-batch loop; it
// is synchronous (cudaMalloc / cudaHostAlloc) unless a device_buffer is given a stream.
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/unique_handle.hpp"
#include "cuda/cuda_error.cuh"

namespace ctforge::kernels::cuda {

/// How a device_buffer obtains and returns its memory (a hook for a pool, or for code that
/// counts allocations): the default is cudaMalloc / cudaFree, or cudaMallocAsync /
/// cudaFreeAsync in the buffer's stream when it has one (`ordered`; `stream` is nullptr
/// otherwise).
struct device_allocator {
  cudaError_t (*allocate)(void** p, std::size_t bytes, cudaStream_t stream, bool ordered);
  cudaError_t (*deallocate)(void* p, cudaStream_t stream, bool ordered);
};

inline cudaError_t default_device_allocate(void** p, std::size_t bytes, cudaStream_t stream,
                                           bool ordered) {
  return ordered ? cudaMallocAsync(p, bytes, stream) : cudaMalloc(p, bytes);
}
inline cudaError_t default_device_deallocate(void* p, cudaStream_t stream, bool ordered) {
  return ordered ? cudaFreeAsync(p, stream) : cudaFree(p);
}
inline constexpr device_allocator k_default_device_allocator{&default_device_allocate,
                                                             &default_device_deallocate};

/// Uninitialised device memory for `count` elements of T, freed on destruction (or move
/// assignment) through its allocator. Without a stream the memory is allocated and freed
/// synchronously (cudaMalloc / cudaFree); with one, both are ordered in that stream
/// (cudaMallocAsync / cudaFreeAsync): the memory may be used by work in that stream (or work
/// ordered after it) only.
template <class T>
class device_buffer {
 public:
  /// `what` names the buffer in the out-of-memory message.
  explicit device_buffer(std::size_t count, const char* what = "device buffer",
                         const device_allocator& alloc = k_default_device_allocator)
      : size_(count), alloc_(alloc) {
    allocate(what);
  }
  /// Allocation and release ordered in `stream`.
  device_buffer(std::size_t count, cudaStream_t stream, const char* what,
                const device_allocator& alloc = k_default_device_allocator)
      : size_(count), stream_(stream), ordered_(true), alloc_(alloc) {
    allocate(what);
  }
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        stream_(o.stream_),
        ordered_(o.ordered_),
        alloc_(o.alloc_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
      ordered_ = o.ordered_;
      alloc_ = o.alloc_;
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  /// The stream allocation and release are ordered in (nullptr when synchronous).
  cudaStream_t stream() const { return stream_; }
  bool stream_ordered() const { return ordered_; }
  /// Gives up ownership: the caller frees the memory from now on (cudaFree for the default
  /// allocator without a stream).
  T* release_ownership() noexcept {
    size_ = 0;
    return std::exchange(ptr_, nullptr);
  }

 private:
  void allocate(const char* what) {
    if (size_ == 0) return;
    const std::size_t bytes = size_ * sizeof(T);
    void* p = nullptr;
    const cudaError_t e = alloc_.allocate(&p, bytes, stream_, ordered_);
    if (e != cudaSuccess)
      throw_cuda(e, ordered_ ? "cudaMallocAsync" : "cudaMalloc", __FILE__, __LINE__,
                 std::string("allocating ") + format_bytes(static_cast<std::int64_t>(bytes)) +
                     " for " + what);
    ptr_ = static_cast<T*>(p);
  }
  void release() noexcept {
    if (ptr_)
      warn_on_error(alloc_.deallocate(ptr_, stream_, ordered_),
                    ordered_ ? "cudaFreeAsync" : "cudaFree");
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  bool ordered_ = false;
  device_allocator alloc_ = k_default_device_allocator;  // copied: no lifetime to track
};

/// Traits of the CUDA handles owned through detail::unique_handle; each release reports a
/// failure on stderr (destructors never throw).
namespace handle_traits {
struct stream {
  using handle_type = cudaStream_t;
  static constexpr cudaStream_t null() noexcept { return nullptr; }
  static void release(cudaStream_t s) noexcept {
    warn_on_error(cudaStreamDestroy(s), "cudaStreamDestroy");
  }
};
struct event {
  using handle_type = cudaEvent_t;
  static constexpr cudaEvent_t null() noexcept { return nullptr; }
  static void release(cudaEvent_t e) noexcept {
    warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
  }
};
struct graph {
  using handle_type = cudaGraph_t;
  static constexpr cudaGraph_t null() noexcept { return nullptr; }
  static void release(cudaGraph_t g) noexcept {
    warn_on_error(cudaGraphDestroy(g), "cudaGraphDestroy");
  }
};
struct graph_exec {
  using handle_type = cudaGraphExec_t;
  static constexpr cudaGraphExec_t null() noexcept { return nullptr; }
  static void release(cudaGraphExec_t e) noexcept {
    warn_on_error(cudaGraphExecDestroy(e), "cudaGraphExecDestroy");
  }
};
struct array {
  using handle_type = cudaArray_t;
  static constexpr cudaArray_t null() noexcept { return nullptr; }
  static void release(cudaArray_t a) noexcept { warn_on_error(cudaFreeArray(a), "cudaFreeArray"); }
};
/// Integer handles: every value the API returns is owned (ownership is recorded apart).
struct cufft {
  using handle_type = cufftHandle;
  static constexpr cufftHandle null() noexcept { return 0; }
  static bool is_null(cufftHandle) noexcept { return false; }
  static void release(cufftHandle h) noexcept { warn_on_error(cufftDestroy(h), "cufftDestroy"); }
};
struct texture {
  using handle_type = cudaTextureObject_t;
  static constexpr cudaTextureObject_t null() noexcept { return 0; }
  static bool is_null(cudaTextureObject_t) noexcept { return false; }
  static void release(cudaTextureObject_t t) noexcept {
    warn_on_error(cudaDestroyTextureObject(t), "cudaDestroyTextureObject");
  }
};
struct surface {
  using handle_type = cudaSurfaceObject_t;
  static constexpr cudaSurfaceObject_t null() noexcept { return 0; }
  static bool is_null(cudaSurfaceObject_t) noexcept { return false; }
  static void release(cudaSurfaceObject_t s) noexcept {
    warn_on_error(cudaDestroySurfaceObject(s), "cudaDestroySurfaceObject");
  }
};
template <class T>
struct pinned {
  using handle_type = T*;
  static constexpr T* null() noexcept { return nullptr; }
  static void release(T* p) noexcept { warn_on_error(cudaFreeHost(p), "cudaFreeHost"); }
};
}  // namespace handle_traits

/// Page-locked host memory (cudaHostAlloc, portable and mapped into the device address space).
template <class T>
class pinned_buffer {
 public:
  explicit pinned_buffer(std::size_t count, const char* what = "pinned host buffer")
      : size_(count) {
    if (count == 0) return;
    const std::size_t bytes = count * sizeof(T);
    T* p = nullptr;
    const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&p), bytes,
                                        cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess)
      throw_cuda(e, "cudaHostAlloc", __FILE__, __LINE__,
                 std::string("allocating ") + format_bytes(static_cast<std::int64_t>(bytes)) +
                     " of page-locked host memory for " + what);
    h_.reset(p);
  }
  pinned_buffer(pinned_buffer&& o) noexcept
      : h_(std::move(o.h_)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      h_ = std::move(o.h_);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  T* data() const { return h_.get(); }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  /// Address of the same memory for device code.
  T* device_pointer() const {
    if (!h_.get()) return nullptr;
    void* d = nullptr;
    CTFORGE_CUDA_TRY(cudaHostGetDevicePointer(&d, h_.get(), 0), "mapping pinned host memory");
    return static_cast<T*>(d);
  }

 private:
  ::ctforge::detail::unique_handle<handle_traits::pinned<T>> h_;
  std::size_t size_ = 0;
};

/// True when the whole host range [p, p + bytes) is page-locked memory CUDA knows
/// (cudaHostAlloc, or cudaHostRegister as ctforge::pinned_host_range does): its first and last
/// bytes both are. Such memory can be the source of an asynchronous copy as it is. Never throws.
inline bool host_range_page_locked(const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
  const auto locked = [](const void* q) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  };
  return locked(p) && locked(static_cast<const char*>(p) + (bytes - 1));
}

/// Non-blocking stream: never synchronises with the legacy default stream.
class stream {
 public:
  stream() = delete;
  explicit stream(int priority) {
    cudaStream_t s = nullptr;
    CTFORGE_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority),
                     "creating a stream");
    h_.reset(s);
  }
  static stream make() { return stream(0); }

  cudaStream_t get() const { return h_.get(); }
  operator cudaStream_t() const { return h_.get(); }
  void synchronize(const std::string& context = {}) const {
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(h_.get()), context);
  }
  /// Makes later work in this stream wait for `ev` (its most recent record).
  void wait(cudaEvent_t ev) const { CTFORGE_CUDA_TRY(cudaStreamWaitEvent(h_.get(), ev, 0)); }

 private:
  ::ctforge::detail::unique_handle<handle_traits::stream> h_;
};

class event {
 public:
  event() = delete;
  /// timing = false creates a cheaper synchronisation-only event.
  explicit event(bool timing) {
    cudaEvent_t e = nullptr;
    CTFORGE_CUDA_TRY(
        cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
        "creating an event");
    h_.reset(e);
  }

  cudaEvent_t get() const { return h_.get(); }
  operator cudaEvent_t() const { return h_.get(); }
  void record(cudaStream_t s) const { CTFORGE_CUDA_TRY(cudaEventRecord(h_.get(), s)); }
  void synchronize() const { CTFORGE_CUDA_TRY(cudaEventSynchronize(h_.get())); }
  /// Milliseconds between two recorded timing events (both must have completed).
  static float elapsed_ms(const event& start, const event& stop) {
    float ms = 0;
    CTFORGE_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms;
  }

 private:
  ::ctforge::detail::unique_handle<handle_traits::event> h_;
};

/// A captured graph (the template; instantiate it into a graph_exec to launch).
class graph {
 public:
  graph() = delete;
  explicit graph(cudaGraph_t g) : h_(g) {
    CTFORGE_CHECK(g != nullptr, "graph: null cudaGraph_t (stream capture produced no graph)");
  }
  /// Captures everything `record(stream)` issues into `s` (which must be idle and not the
  /// default stream). Relaxed mode: libraries (cuFFT) may make set-up calls while capturing.
  /// Throws, leaving no capture active, when anything fails.
  template <class F>
  static graph capture(cudaStream_t s, F&& record) {
    CTFORGE_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed),
                     "beginning stream capture");
    try {
      record(s);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(s, &broken);
      if (broken) cudaGraphDestroy(broken);
      cudaGetLastError();
      throw;
    }
    cudaGraph_t g = nullptr;
    CTFORGE_CUDA_TRY(cudaStreamEndCapture(s, &g), "ending stream capture");
    return graph(g);
  }

  cudaGraph_t get() const { return h_.get(); }

 private:
  ::ctforge::detail::unique_handle<handle_traits::graph> h_;
};

/// Instantiated graph, launched (replayed) any number of times.
class graph_exec {
 public:
  graph_exec() = delete;
  explicit graph_exec(const graph& g) {
    cudaGraphExec_t e = nullptr;
    CTFORGE_CUDA_TRY(cudaGraphInstantiate(&e, g.get(), 0), "instantiating a CUDA graph");
    h_.reset(e);
  }

  cudaGraphExec_t get() const { return h_.get(); }
  void launch(cudaStream_t s, const char* what = "graph") const {
    CTFORGE_CUDA_TRY(cudaGraphLaunch(h_.get(), s), std::string("launching the ") + what + " graph");
  }

 private:
  ::ctforge::detail::unique_handle<handle_traits::graph_exec> h_;
};

/// cuFFT plan handle. The plan is created without automatic work-area allocation, so the
/// caller learns the work size (work_bytes) and provides the memory with set_work_area.
class cufft_plan {
 public:
  cufft_plan() = delete;
  /// Batched 1D transform of length n over `batch` rows with the given advanced layout.
  cufft_plan(int n, int batch, int in_dist, int out_dist, cufftType type) {
    int dims[1] = {n};
    int in_embed[1] = {in_dist};
    int out_embed[1] = {out_dist};
    make(1, dims, in_embed, in_dist, out_embed, out_dist, type, batch,
         std::to_string(batch) + " transforms of length " + std::to_string(n));
  }

  /// Batched 2D transforms of nr x nc (row-major, contiguous; R2C: nr x (nc / 2 + 1) complex
  /// values out).
  cufft_plan(int nr, int nc, int batch, cufftType type) {
    int dims[2] = {nr, nc};
    make(2, dims, nullptr, 0, nullptr, 0, type, batch,
         std::to_string(batch) + " 2D transforms of " + std::to_string(nr) + " x " +
             std::to_string(nc));
  }

  cufftHandle get() const { return h_.get(); }
  std::size_t work_bytes() const { return work_; }
  void set_work_area(void* area) const { CTFORGE_CUFFT_TRY(cufftSetWorkArea(h_.get(), area)); }
  void set_stream(cudaStream_t s) const { CTFORGE_CUFFT_TRY(cufftSetStream(h_.get(), s)); }

 private:
  /// cufftMakePlanMany without automatic work-area allocation (`what` names the transforms in
  /// the error); the handle is owned once planned.
  void make(int rank, int* dims, int* in_embed, int in_dist, int* out_embed, int out_dist,
            cufftType type, int batch, const std::string& what) {
    cufftHandle h = 0;
    CTFORGE_CUFFT_TRY(cufftCreate(&h), "creating a cuFFT plan");
    try {
      CTFORGE_CUFFT_TRY(cufftSetAutoAllocation(h, 0));
      std::size_t work = 0;
      CTFORGE_CUFFT_TRY(cufftMakePlanMany(h, rank, dims, in_embed, 1, in_dist, out_embed, 1,
                                          out_dist, type, batch, &work),
                        "planning " + what);
      work_ = work;
    } catch (...) {
      cufftDestroy(h);  // not owned yet
      throw;
    }
    h_.reset(h);
  }

  ::ctforge::detail::unique_handle<handle_traits::cufft> h_;
  std::size_t work_ = 0;
};

/// float cudaArray: a layered 2D array (projections: width = cols, height = rows,
/// layers = views) or a 3D array (volumes: width = nx, height = ny, depth = nz).
class cuda_array {
 public:
  enum class kind { layered_2d, volume_3d };
  cuda_array() = delete;
  /// surface = true also allows surface writes (cudaArraySurfaceLoadStore).
  cuda_array(kind k, std::int64_t width, std::int64_t height, std::int64_t depth, bool surface,
             const char* what = "texture array")
      : width_(width), height_(height), depth_(depth) {
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    const cudaExtent ext =
        make_cudaExtent(static_cast<std::size_t>(width), static_cast<std::size_t>(height),
                        static_cast<std::size_t>(depth));
    unsigned flags = k == kind::layered_2d ? cudaArrayLayered : cudaArrayDefault;
    if (surface) flags |= cudaArraySurfaceLoadStore;
    cudaArray_t a = nullptr;
    const cudaError_t e = cudaMalloc3DArray(&a, &desc, ext, flags);
    if (e != cudaSuccess)
      throw_cuda(e, "cudaMalloc3DArray", __FILE__, __LINE__,
                 std::string("allocating a ") + std::to_string(width) + " x " +
                     std::to_string(height) + " x " + std::to_string(depth) + " float array (" +
                     format_bytes(width * height * depth * 4) + ") for " + what);
    h_.reset(a);
  }

  cudaArray_t get() const { return h_.get(); }
  std::int64_t width() const { return width_; }
  std::int64_t height() const { return height_; }
  std::int64_t depth() const { return depth_; }

  /// Parameters of an async copy of `depth` slices of `height` rows of `width` floats from
  /// pitched linear memory (pitch in bytes) into this array at slice/layer `dst_z`.
  cudaMemcpy3DParms copy_from(const float* src, std::size_t pitch_bytes, std::int64_t width,
                              std::int64_t height, std::int64_t depth, std::int64_t dst_z = 0,
                              cudaMemcpyKind kind = cudaMemcpyDefault) const {
    cudaMemcpy3DParms p{};
    p.srcPtr =
        make_cudaPitchedPtr(const_cast<float*>(src), pitch_bytes, static_cast<std::size_t>(width),
                            static_cast<std::size_t>(height));
    p.dstArray = h_.get();
    p.dstPos = make_cudaPos(0, 0, static_cast<std::size_t>(dst_z));
    p.extent = make_cudaExtent(static_cast<std::size_t>(width), static_cast<std::size_t>(height),
                               static_cast<std::size_t>(depth));
    p.kind = kind;
    return p;
  }

 private:
  ::ctforge::detail::unique_handle<handle_traits::array> h_;
  std::int64_t width_ = 0, height_ = 0, depth_ = 0;
};

/// Texture over a float cudaArray with unnormalised coordinates and border (zero) addressing.
/// linear = true: hardware bilinear / trilinear filtering (read at index + 0.5);
/// linear = false: point sampling (exact texel values).
class texture_object {
 public:
  texture_object() = delete;
  texture_object(const cuda_array& a, bool linear) {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a.get();
    cudaTextureDesc td{};
    for (int i = 0; i < 3; ++i) td.addressMode[i] = cudaAddressModeBorder;
    td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 0;
    // borderColor defaults to zero (value-initialised desc).
    cudaTextureObject_t t = 0;
    CTFORGE_CUDA_TRY(cudaCreateTextureObject(&t, &res, &td, nullptr), "creating a texture object");
    h_.reset(t);
  }

  cudaTextureObject_t get() const { return h_.get(); }

 private:
  ::ctforge::detail::unique_handle<handle_traits::texture> h_;
};

/// Surface over a cudaArray created with surface = true (kernel writes into the array).
class surface_object {
 public:
  surface_object() = delete;
  explicit surface_object(const cuda_array& a) {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a.get();
    cudaSurfaceObject_t s = 0;
    CTFORGE_CUDA_TRY(cudaCreateSurfaceObject(&s, &res), "creating a surface object");
    h_.reset(s);
  }

  cudaSurfaceObject_t get() const { return h_.get(); }

 private:
  ::ctforge::detail::unique_handle<handle_traits::surface> h_;
};

/// Makes `device` current for the scope and restores the previous device afterwards.
class device_guard {
 public:
  device_guard() = delete;
  explicit device_guard(int device) {
    CTFORGE_CUDA_TRY(cudaGetDevice(&previous_), "querying the current device");
    if (previous_ != device)
      CTFORGE_CUDA_TRY(cudaSetDevice(device), "selecting CUDA device " + std::to_string(device));
    changed_ = previous_ != device;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  device_guard(device_guard&&) = delete;
  device_guard& operator=(device_guard&&) = delete;
  ~device_guard() {
    if (changed_) warn_on_error(cudaSetDevice(previous_), "cudaSetDevice (restore)");
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace ctforge::kernels::cuda
