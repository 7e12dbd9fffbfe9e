// Move-only owners of CUDA resources (CUDA translation units only). No default construction:
// every object owns a live resource from construction until destruction or move. Destructors
// never throw; a failure there is reported on stderr.
//
// Allocation is synchronous (cudaMalloc / cudaMallocHost) and happens during set-up only, never
// inside stream capture or the per-batch loop.
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/cuda_error.cuh"

namespace ctforge::kernels::cuda {

/// Uninitialised device memory for `count` elements of T.
template <class T>
class device_buffer {
 public:
  /// `what` names the buffer in the out-of-memory message.
  explicit device_buffer(std::size_t count, const char* what = "device buffer") : size_(count) {
    if (count == 0) return;
    const std::size_t bytes = count * sizeof(T);
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes);
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      throw_cuda(e, "cudaMalloc", __FILE__, __LINE__,
                 std::string("allocating ") + format_bytes(static_cast<std::int64_t>(bytes)) +
                     " for " + what);
    }
  }
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  /// Gives up ownership: the caller frees the memory (cudaFree) from now on.
  T* release_ownership() noexcept {
    size_ = 0;
    return std::exchange(ptr_, nullptr);
  }

 private:
  void release() noexcept {
    if (ptr_) warn_on_error(cudaFree(ptr_), "cudaFree");
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

/// Page-locked host memory (cudaHostAlloc, portable and mapped into the device address space).
template <class T>
class pinned_buffer {
 public:
  explicit pinned_buffer(std::size_t count, const char* what = "pinned host buffer")
      : size_(count) {
    if (count == 0) return;
    const std::size_t bytes = count * sizeof(T);
    const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&ptr_), bytes,
                                        cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      throw_cuda(e, "cudaHostAlloc", __FILE__, __LINE__,
                 std::string("allocating ") + format_bytes(static_cast<std::int64_t>(bytes)) +
                     " of page-locked host memory for " + what);
    }
  }
  pinned_buffer(pinned_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { release(); }

  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  /// Address of the same memory for device code.
  T* device_pointer() const {
    if (!ptr_) return nullptr;
    void* d = nullptr;
    CTFORGE_CUDA_TRY(cudaHostGetDevicePointer(&d, ptr_, 0), "mapping pinned host memory");
    return static_cast<T*>(d);
  }

 private:
  void release() noexcept {
    if (ptr_) warn_on_error(cudaFreeHost(ptr_), "cudaFreeHost");
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
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
    CTFORGE_CUDA_TRY(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority),
                     "creating a stream");
  }
  static stream make() { return stream(0); }
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      release();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { release(); }

  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  void synchronize(const std::string& context = {}) const {
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), context);
  }
  /// Makes later work in this stream wait for `ev` (its most recent record).
  void wait(cudaEvent_t ev) const { CTFORGE_CUDA_TRY(cudaStreamWaitEvent(s_, ev, 0)); }

 private:
  void release() noexcept {
    if (s_) warn_on_error(cudaStreamDestroy(s_), "cudaStreamDestroy");
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

class event {
 public:
  event() = delete;
  /// timing = false creates a cheaper synchronisation-only event.
  explicit event(bool timing) {
    CTFORGE_CUDA_TRY(
        cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming),
        "creating an event");
  }
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      release();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() { release(); }

  cudaEvent_t get() const { return e_; }
  operator cudaEvent_t() const { return e_; }
  void record(cudaStream_t s) const { CTFORGE_CUDA_TRY(cudaEventRecord(e_, s)); }
  void synchronize() const { CTFORGE_CUDA_TRY(cudaEventSynchronize(e_)); }
  /// Milliseconds between two recorded timing events (both must have completed).
  static float elapsed_ms(const event& start, const event& stop) {
    float ms = 0;
    CTFORGE_CUDA_TRY(cudaEventElapsedTime(&ms, start.e_, stop.e_));
    return ms;
  }

 private:
  void release() noexcept {
    if (e_) warn_on_error(cudaEventDestroy(e_), "cudaEventDestroy");
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

/// A captured graph (the template; instantiate it into a graph_exec to launch).
class graph {
 public:
  graph() = delete;
  explicit graph(cudaGraph_t g) : g_(g) {
    CTFORGE_CHECK(g_ != nullptr, "graph: null cudaGraph_t (stream capture produced no graph)");
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
  graph(graph&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  graph& operator=(graph&& o) noexcept {
    if (this != &o) {
      release();
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph() { release(); }

  cudaGraph_t get() const { return g_; }

 private:
  void release() noexcept {
    if (g_) warn_on_error(cudaGraphDestroy(g_), "cudaGraphDestroy");
    g_ = nullptr;
  }
  cudaGraph_t g_ = nullptr;
};

/// Instantiated graph, launched (replayed) any number of times.
class graph_exec {
 public:
  graph_exec() = delete;
  explicit graph_exec(const graph& g) {
    CTFORGE_CUDA_TRY(cudaGraphInstantiate(&e_, g.get(), 0), "instantiating a CUDA graph");
  }
  graph_exec(graph_exec&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  graph_exec& operator=(graph_exec&& o) noexcept {
    if (this != &o) {
      release();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;
  ~graph_exec() { release(); }

  cudaGraphExec_t get() const { return e_; }
  void launch(cudaStream_t s, const char* what = "graph") const {
    CTFORGE_CUDA_TRY(cudaGraphLaunch(e_, s), std::string("launching the ") + what + " graph");
  }

 private:
  void release() noexcept {
    if (e_) warn_on_error(cudaGraphExecDestroy(e_), "cudaGraphExecDestroy");
    e_ = nullptr;
  }
  cudaGraphExec_t e_ = nullptr;
};

/// cuFFT plan handle. The plan is created without automatic work-area allocation, so the
/// caller learns the work size (work_bytes) and provides the memory with set_work_area.
class cufft_plan {
 public:
  cufft_plan() = delete;
  /// Batched 1D transform of length n over `batch` rows with the given advanced layout.
  cufft_plan(int n, int batch, int in_dist, int out_dist, cufftType type) {
    CTFORGE_CUFFT_TRY(cufftCreate(&h_), "creating a cuFFT plan");
    try {
      CTFORGE_CUFFT_TRY(cufftSetAutoAllocation(h_, 0));
      int dims[1] = {n};
      int in_embed[1] = {in_dist};
      int out_embed[1] = {out_dist};
      std::size_t work = 0;
      CTFORGE_CUFFT_TRY(
          cufftMakePlanMany(h_, 1, dims, in_embed, 1, in_dist, out_embed, 1, out_dist, type, batch,
                            &work),
          "planning " + std::to_string(batch) + " transforms of length " + std::to_string(n));
      work_ = work;
    } catch (...) {
      cufftDestroy(h_);  // the destructor does not run when the constructor throws
      throw;
    }
    created_ = true;
  }
  cufft_plan(cufft_plan&& o) noexcept
      : h_(o.h_), created_(std::exchange(o.created_, false)), work_(o.work_) {}
  cufft_plan& operator=(cufft_plan&& o) noexcept {
    if (this != &o) {
      release();
      h_ = o.h_;
      created_ = std::exchange(o.created_, false);
      work_ = o.work_;
    }
    return *this;
  }
  cufft_plan(const cufft_plan&) = delete;
  cufft_plan& operator=(const cufft_plan&) = delete;
  ~cufft_plan() { release(); }

  cufftHandle get() const { return h_; }
  std::size_t work_bytes() const { return work_; }
  void set_work_area(void* area) const { CTFORGE_CUFFT_TRY(cufftSetWorkArea(h_, area)); }
  void set_stream(cudaStream_t s) const { CTFORGE_CUFFT_TRY(cufftSetStream(h_, s)); }

 private:
  void release() noexcept {
    if (created_) warn_on_error(cufftDestroy(h_), "cufftDestroy");
    created_ = false;
  }
  cufftHandle h_ = 0;
  bool created_ = false;
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
    const cudaError_t e = cudaMalloc3DArray(&a_, &desc, ext, flags);
    if (e != cudaSuccess) {
      a_ = nullptr;
      throw_cuda(e, "cudaMalloc3DArray", __FILE__, __LINE__,
                 std::string("allocating a ") + std::to_string(width) + " x " +
                     std::to_string(height) + " x " + std::to_string(depth) + " float array (" +
                     format_bytes(width * height * depth * 4) + ") for " + what);
    }
  }
  cuda_array(cuda_array&& o) noexcept
      : a_(std::exchange(o.a_, nullptr)), width_(o.width_), height_(o.height_), depth_(o.depth_) {}
  cuda_array& operator=(cuda_array&& o) noexcept {
    if (this != &o) {
      release();
      a_ = std::exchange(o.a_, nullptr);
      width_ = o.width_;
      height_ = o.height_;
      depth_ = o.depth_;
    }
    return *this;
  }
  cuda_array(const cuda_array&) = delete;
  cuda_array& operator=(const cuda_array&) = delete;
  ~cuda_array() { release(); }

  cudaArray_t get() const { return a_; }
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
    p.dstArray = a_;
    p.dstPos = make_cudaPos(0, 0, static_cast<std::size_t>(dst_z));
    p.extent = make_cudaExtent(static_cast<std::size_t>(width), static_cast<std::size_t>(height),
                               static_cast<std::size_t>(depth));
    p.kind = kind;
    return p;
  }

 private:
  void release() noexcept {
    if (a_) warn_on_error(cudaFreeArray(a_), "cudaFreeArray");
    a_ = nullptr;
  }
  cudaArray_t a_ = nullptr;
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
    CTFORGE_CUDA_TRY(cudaCreateTextureObject(&t_, &res, &td, nullptr), "creating a texture object");
    created_ = true;
  }
  texture_object(texture_object&& o) noexcept
      : t_(o.t_), created_(std::exchange(o.created_, false)) {}
  texture_object& operator=(texture_object&& o) noexcept {
    if (this != &o) {
      release();
      t_ = o.t_;
      created_ = std::exchange(o.created_, false);
    }
    return *this;
  }
  texture_object(const texture_object&) = delete;
  texture_object& operator=(const texture_object&) = delete;
  ~texture_object() { release(); }

  cudaTextureObject_t get() const { return t_; }

 private:
  void release() noexcept {
    if (created_) warn_on_error(cudaDestroyTextureObject(t_), "cudaDestroyTextureObject");
    created_ = false;
  }
  cudaTextureObject_t t_ = 0;
  bool created_ = false;
};

/// Surface over a cudaArray created with surface = true (kernel writes into the array).
class surface_object {
 public:
  surface_object() = delete;
  explicit surface_object(const cuda_array& a) {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a.get();
    CTFORGE_CUDA_TRY(cudaCreateSurfaceObject(&s_, &res), "creating a surface object");
    created_ = true;
  }
  surface_object(surface_object&& o) noexcept
      : s_(o.s_), created_(std::exchange(o.created_, false)) {}
  surface_object& operator=(surface_object&& o) noexcept {
    if (this != &o) {
      release();
      s_ = o.s_;
      created_ = std::exchange(o.created_, false);
    }
    return *this;
  }
  surface_object(const surface_object&) = delete;
  surface_object& operator=(const surface_object&) = delete;
  ~surface_object() { release(); }

  cudaSurfaceObject_t get() const { return s_; }

 private:
  void release() noexcept {
    if (created_) warn_on_error(cudaDestroySurfaceObject(s_), "cudaDestroySurfaceObject");
    created_ = false;
  }
  cudaSurfaceObject_t s_ = 0;
  bool created_ = false;
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
