// GPU reconstruction pipeline: FDK / FBP (cuda_reconstruct) and plain back-projection
// (cuda_back_project). See docs/cuda.md for the design; in short:
//
//  * Views are processed in batches of B (<= 1024). Three streams run three stages; batch j
//    uses buffer slot p = j % 2 of every double-buffered resource:
//      upload   (s_up): host memcpy of the batch into pinned staging[p], H2D into raw[p]
//      filter   (s_f) : graph F[p]: pre-weight + zero pad -> R2C -> x response -> C2R ->
//                       cudaMemcpy3DAsync into the layered array[p] (or, without filtering,
//                       raw[p] -> array[p])
//      backproj (s_b) : graph B[p]: assemble constants -> memcpy node into __constant__ ->
//                       back-projection kernel reading array[p] through a layered texture
//    Events order them: U(j) after F(j-2) (raw[p] free), F(j) after U(j) and B(j-2)
//    (array[p] free), B(j) after F(j); the host refills staging[p] after U(j-2) completed.
//    So the upload of batch j+1 and the filtering of batch j overlap the back-projection of
//    batch j-1.
//  * Each stage's per-batch work is captured once per slot as a CUDA graph and replayed for
//    every batch. Kernels read the batch index from a device counter that the graph
//    increments at its end; per-view data (matrices, pre-weights) sit in device arrays
//    uploaded once. Nothing is allocated, planned or created inside the batch loop.
//  * When volume + batch buffers exceed the memory budget, the volume is split into z-slabs:
//    phase 1 filters every view once into a projection store (device memory when it fits,
//    else mapped pinned host memory); phase 2, per slab, gathers from the store only the
//    detector rows the slab projects onto (from its corners under all matrices) into the
//    texture array and back-projects with row-shifted matrices.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/parallel_copy.hpp"
#include "core/projection_checks.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_raii.cuh"
#include "cuda/pinned_pool.cuh"

namespace ctforge::kernels::cuda {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

thread_local detail::cuda_pipeline_stats g_last_stats;

/// The back-projection constants live in one __constant__ block per process: GPU calls are
/// serialised.
std::mutex& backend_mutex() {
  return backprojection_constants_mutex();
}

/// What the pipeline computes.
struct job {
  const projection_view* proj = nullptr;
  const geometry* g = nullptr;
  volume_geometry vg;
  bool filter = false;                     // pre-weight + ramp filter (FDK / FBP)
  const detail::fdk_job* setup = nullptr;  // when filter
  std::vector<float> response;             // when filter: ramp_response(padded_len, ...)
  int padded_len = 0;                      // when filter
  bp_weighting weighting = bp_weighting::none;
  interp mode = interp::exact;
  int threads = 0;
  const std::function<void(double)>* progress = nullptr;
  const cancellation_token* cancel = nullptr;
  device_array* device_out = nullptr;  // keep the volume on the device (no z-slabs)
};

void report(const job& jb, double f) {
  if (jb.progress && *jb.progress) (*jb.progress)(std::clamp(f, 0.0, 1.0));
}

bool cancel_requested(const job& jb) { return jb.cancel && jb.cancel->requested(); }

/// Timing event pair per batch; elapsed times are summed once the work has completed.
struct stage_timer {
  std::vector<event> start, stop;
  explicit stage_timer(int n) {
    start.reserve(static_cast<std::size_t>(n));
    stop.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      start.emplace_back(true);
      stop.emplace_back(true);
    }
  }
  double sum_ms(int n) const {
    double t = 0;
    for (int i = 0; i < n; ++i)
      t += event::elapsed_ms(start[static_cast<std::size_t>(i)], stop[static_cast<std::size_t>(i)]);
    return t;
  }
};

volume run_pipeline(const job& jb, const detail::cuda_options& copt) {
  const auto t_start = clock_type::now();
  std::lock_guard<std::mutex> lock(backend_mutex());
  detail::require_cuda_device(copt.device);
  const device_guard guard(copt.device);

  const projection_view& proj = *jb.proj;
  // The output volume's zero-filled host allocation (page faults on first touch: about 0.1 to
  // 0.5 s for 512^3) is made on another thread while the GPU works; download() takes it over.
  std::future<volume> out_pending = std::async(
      std::launch::async, [vg = jb.vg, keep = jb.device_out != nullptr] {
        return keep ? volume{} : volume(vg);
      });
  // Projections in GPU memory (a CuPy / PyTorch tensor): copied batch by batch on the device.
  bool input_on_device = false;
  if (proj.space == memory_space::cuda_device) {
    input_on_device = detail::cuda_pointer_on_device(proj.data.data(), copt.device, "the projections");
    CTFORGE_EXPECTS(input_on_device,
                    "the projections are marked as GPU memory but CUDA does not know the pointer");
    // The producer's queued work (on streams of its own) completes before the copies start.
    CTFORGE_CUDA_TRY(cudaDeviceSynchronize(), "waiting for the device projections' producer");
  }
  const geometry& g = *jb.g;
  const volume_geometry& vg = jb.vg;
  const std::int64_t V = proj.views, R = proj.rows, C = proj.cols;
  const int threads = jb.threads;  // host copies (detail::parallel_copy: 0 = all cores)

  // ---- limits ---------------------------------------------------------------------------
  int max_w = 0, max_h = 0, max_layers = 0;
  CTFORGE_CUDA_TRY(
      cudaDeviceGetAttribute(&max_w, cudaDevAttrMaxTexture2DLayeredWidth, copt.device));
  CTFORGE_CUDA_TRY(
      cudaDeviceGetAttribute(&max_h, cudaDevAttrMaxTexture2DLayeredHeight, copt.device));
  CTFORGE_CUDA_TRY(
      cudaDeviceGetAttribute(&max_layers, cudaDevAttrMaxTexture2DLayeredLayers, copt.device));
  CTFORGE_EXPECTS(C <= max_w && R <= max_h && R <= 65535,
                  "CUDA backend: detector of " + std::to_string(C) + " x " + std::to_string(R) +
                      " pixels exceeds the layered texture limit (" + std::to_string(max_w) +
                      " x " + std::to_string(std::min(max_h, 65535)) + ")");
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 31) / 32 && vg.ny < 65535 * 4 && vg.nz < 65535 * 8,
                  "CUDA backend: volume of " + std::to_string(vg.nx) + " x " +
                      std::to_string(vg.ny) + " x " + std::to_string(vg.nz) +
                      " voxels exceeds the launch limits");

  const stream s_up(0), s_f(0), s_b(0);

  // ---- memory plan ------------------------------------------------------------------------
  CTFORGE_EXPECTS(copt.views_per_batch >= 0, "views per batch must be >= 0");
  const std::int64_t budget = device_memory_budget(copt.gpu_memory_limit_bytes);
  plan_input pin = make_plan_input(V, R, C, vg, jb.filter, jb.padded_len);
  pin.requested_batch = copt.views_per_batch;
  pin.max_batch = max_layers;
  // The plan is made with the real cuFFT work area of the batch sizes it considers (plans are
  // cached per shape, so the filter finally used is planned at most once).
  std::optional<ramp_filter_gpu> filter;
  int plans_created = 0;
  const auto make_filter = [&](int batch) {
    if (filter && filter->rows_total() == batch * R) return;
    filter.emplace(jb.padded_len, static_cast<int>(batch * R), jb.response, s_f);
    plans_created += filter->planned() ? 1 : 0;
  };
  const plan pl = make_pipeline_plan(pin, budget, [&](int batch) {
    make_filter(batch);
    return filter->work_bytes();
  });
  if (jb.filter) make_filter(pl.views_per_batch);
  CTFORGE_EXPECTS(!jb.device_out || !pl.slab_mode,
                  "a volume kept in GPU memory must fit there whole: " + std::to_string(vg.nx) +
                      " x " + std::to_string(vg.ny) + " x " + std::to_string(vg.nz) +
                      " voxels need z-slabs within the memory limit (use host output)");

  const int B = pl.views_per_batch;
  const int nb = pl.batches;
  const std::int64_t batch_floats = static_cast<std::int64_t>(B) * R * C;
  // Flat detectors: projection matrices; cylindrical ones: kernels::cyl_map (the same 12 floats
  // per view in the back-projector's constant memory, read by its curved variant).
  const bool curved = g.curved();
  const std::vector<projection_matrix> mats_d =
      curved ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  const std::vector<cyl_map_d> maps_d =
      curved ? cylinder_maps_d(g) : std::vector<cyl_map_d>{};

  // Slabs and the detector rows each needs.
  const std::vector<slab_info> slabs = make_slabs(pl, vg, mats_d, R, curved ? &maps_d : nullptr);
  int max_rows_valid = 0;
  for (const auto& s : slabs) max_rows_valid = std::max(max_rows_valid, s.rows_valid);
  const std::int64_t array_rows = pl.slab_mode ? std::min<std::int64_t>(R, max_rows_valid + 1) : R;

  // ---- resources (all allocated here, freed on return or throw) ----------------------------
  const event ev_hdr(false);
  std::vector<event> ev_u, ev_f, ev_b;
  for (int p = 0; p < 2; ++p) {
    ev_u.emplace_back(false);
    ev_f.emplace_back(false);
    ev_b.emplace_back(false);
  }
  stage_timer t_filter(nb), t_bp(nb);

  // Page-locked staging from the process-wide pool (pinning is slow; see pinned_pool.cuh).
  std::int64_t pinned_allocated = 0;
  pinned_pool::lease staging0 =
      lease_pinned(static_cast<std::size_t>(batch_floats), "projection staging", &pinned_allocated);
  pinned_pool::lease staging1 =
      lease_pinned(static_cast<std::size_t>(batch_floats), "projection staging", &pinned_allocated);
  const pinned_buffer<float>* staging[2] = {&staging0.get(), &staging1.get()};
  device_buffer<float> raw0(static_cast<std::size_t>(batch_floats), "a batch of projections");
  device_buffer<float> raw1(static_cast<std::size_t>(batch_floats), "a batch of projections");
  float* raw[2] = {raw0.data(), raw1.data()};

  const int pitch = jb.filter ? filter->pitch() : static_cast<int>(C);
  std::optional<device_buffer<float>> fft_rows, fft_work;
  if (jb.filter) {
    fft_rows.emplace(
        static_cast<std::size_t>(B) * static_cast<std::size_t>(R) * static_cast<std::size_t>(pitch),
        "the FFT row buffer");
    fft_work.emplace(std::max<std::size_t>(filter->work_bytes(), 1), "the cuFFT work area");
    filter->set_work_area(fft_work->data());
  }
  const bool need_arrays_surface = pl.slab_mode;
  cuda_array arr0(cuda_array::kind::layered_2d, C, array_rows, B, need_arrays_surface,
                  "filtered projections");
  cuda_array arr1(cuda_array::kind::layered_2d, C, array_rows, B, need_arrays_surface,
                  "filtered projections");
  const cuda_array* arrays[2] = {&arr0, &arr1};
  const texture_object tex_lin0(arr0, true), tex_lin1(arr1, true);
  const texture_object tex_pt0(arr0, false), tex_pt1(arr1, false);
  const texture_object* tex_lin[2] = {&tex_lin0, &tex_lin1};
  const texture_object* tex_pt[2] = {&tex_pt0, &tex_pt1};
  std::optional<surface_object> surf0, surf1;
  if (need_arrays_surface) {
    surf0.emplace(arr0);
    surf1.emplace(arr1);
  }

  device_buffer<float> vol_dev(static_cast<std::size_t>(vg.nx * vg.ny * pl.slab_nz), "the volume");
  device_buffer<int> counters(2, "batch counters");
  // Linear index of the first non-finite projection value the pre-weighting read (~0: none).
  device_buffer<unsigned long long> non_finite(1, "the non-finite value flag");
  int* cnt_f = counters.data();
  int* cnt_b = counters.data() + 1;
  device_buffer<bp_constants> bp_staging(1, "back-projection constants");
  device_buffer<bp_slab_header> slab_dev(1, "slab header");
  device_buffer<proj_matrix> mats_dev(static_cast<std::size_t>(V), "projection matrices");
  std::optional<device_buffer<preweight_view>> pw_dev;
  if (jb.filter) pw_dev.emplace(static_cast<std::size_t>(V), "pre-weights");
  // Host-side slab header + matrices, uploaded per slab.
  pinned_buffer<proj_matrix> mats_host(static_cast<std::size_t>(V), "projection matrices");
  pinned_buffer<bp_slab_header> slab_host(1, "slab header");

  std::optional<device_buffer<float>> store_dev;
  std::optional<pinned_buffer<float>> store_host;
  float* store = nullptr;
  if (pl.slab_mode) {
    const std::size_t n = static_cast<std::size_t>(V * R * C);
    if (pl.device_store) {
      store_dev.emplace(n, "the filtered projection store");
      store = store_dev->data();
    } else {
      store_host.emplace(n, "the filtered projection store");
      store = store_host->device_pointer();
    }
  }

  // Per-call constants.
  if (jb.filter)
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(pw_dev->data(), jb.setup->views.data(),
                                     static_cast<std::size_t>(V) * sizeof(preweight_view),
                                     cudaMemcpyHostToDevice, s_f),
                     "uploading the pre-weights");
  CTFORGE_CUDA_TRY(cudaMemsetAsync(raw[0], 0, raw0.bytes(), s_f));
  CTFORGE_CUDA_TRY(cudaMemsetAsync(raw[1], 0, raw1.bytes(), s_f));
  CTFORGE_CUDA_TRY(cudaMemsetAsync(counters.data(), 0, counters.bytes(), s_f));

  // ---- the captured sequences ---------------------------------------------------------------
  const auto upload_params = [&](int p) -> cudaMemcpy3DParms {
    return arrays[p]->copy_from(jb.filter ? fft_rows->data() : raw[p],
                                static_cast<std::size_t>(pitch) * sizeof(float), C, R, B, 0,
                                cudaMemcpyDeviceToDevice);
  };
  const auto pad_and_filter = [&](cudaStream_t s, int p) {
    preweight_batch pb{};
    pb.raw = raw[p];
    pb.out = fft_rows->data();
    pb.views = pw_dev->data();
    pb.counter = cnt_f;
    pb.first_non_finite = non_finite.data();
    pb.params = jb.setup->params;
    pb.views_per_batch = B;
    pb.total_views = static_cast<int>(V);
    pb.cols = static_cast<int>(C);
    pb.rows = static_cast<int>(R);
    pb.padded_len = jb.padded_len;
    pb.pitch = pitch;
    enqueue_preweight(s, pb, true);
    filter->enqueue(s, fft_rows->data());
  };
  // Streaming: filtered batch into array[p].
  const auto seq_filter_to_array = [&](cudaStream_t s, int p) {
    if (jb.filter) pad_and_filter(s, p);
    const cudaMemcpy3DParms cp = upload_params(p);
    CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s), "copying projections into the texture array");
    enqueue_bump(s, cnt_f);
  };
  // Slab phase 1: filtered batch into the store.
  const auto seq_filter_to_store = [&](cudaStream_t s, int p) {
    if (jb.filter) pad_and_filter(s, p);
    store_batch sb{};
    sb.src = jb.filter ? fft_rows->data() : raw[p];
    sb.store = store;
    sb.counter = cnt_f;
    sb.views_per_batch = B;
    sb.total_views = static_cast<int>(V);
    sb.cols = static_cast<int>(C);
    sb.rows = static_cast<int>(R);
    sb.src_pitch = pitch;
    enqueue_store(s, sb);
    enqueue_bump(s, cnt_f);
  };
  // Slab phase 2: rows of the slab from the store into array[p].
  const auto seq_gather = [&](cudaStream_t s, int p) {
    gather_batch gb{};
    gb.store = store;
    gb.surface = (p == 0 ? surf0 : surf1)->get();
    gb.slab = slab_dev.data();
    gb.counter = cnt_f;
    gb.views_per_batch = B;
    gb.total_views = static_cast<int>(V);
    gb.cols = static_cast<int>(C);
    gb.rows = static_cast<int>(R);
    gb.array_rows = static_cast<int>(array_rows);
    enqueue_gather(s, gb);
    enqueue_bump(s, cnt_f);
  };
  const auto seq_backproject = [&](cudaStream_t s, int p) {
    bp_sources src{};
    src.slab = slab_dev.data();
    src.matrices = mats_dev.data();
    src.counter = cnt_b;
    src.staging = bp_staging.data();
    src.views_per_batch = B;
    src.total_views = static_cast<int>(V);
    enqueue_backprojection(s, jb.weighting, jb.mode, src, tex_lin[p]->get(), tex_pt[p]->get(),
                           vol_dev.data(), static_cast<int>(vg.nx), static_cast<int>(vg.ny),
                           static_cast<int>(pl.slab_nz), curved);
    enqueue_bump(s, cnt_b);
  };

  // Warm-up outside capture: loads every kernel and lets cuFFT finish any lazy initialisation
  // (nothing may allocate or load modules while a stream is being captured).
  preload_backprojection_kernels();
  preload_pipeline_kernels();
  if (jb.filter) pad_and_filter(s_f, 0);
  CTFORGE_CUDA_TRY(cudaMemsetAsync(counters.data(), 0, counters.bytes(), s_f));
  CTFORGE_CUDA_TRY(cudaMemsetAsync(non_finite.data(), 0xFF, non_finite.bytes(), s_f));
  s_f.synchronize("warming up the filter");

  std::vector<graph_exec> g_filter, g_bp;
  for (int p = 0; p < 2; ++p) {
    const graph gf = graph::capture(s_f, [&](cudaStream_t s) {
      if (!pl.slab_mode)
        seq_filter_to_array(s, p);
      else
        seq_filter_to_store(s, p);
    });
    g_filter.emplace_back(gf);
    const graph gb = graph::capture(s_b, [&](cudaStream_t s) { seq_backproject(s, p); });
    g_bp.emplace_back(gb);
  }
  std::vector<graph_exec> g_gather;
  if (pl.slab_mode)
    for (int p = 0; p < 2; ++p) {
      const graph gg = graph::capture(s_f, [&](cudaStream_t s) { seq_gather(s, p); });
      g_gather.emplace_back(gg);
    }

  detail::cuda_pipeline_stats st;
  st.views_per_batch = B;
  st.batches = nb;
  st.pinned_bytes_allocated = pinned_allocated;
  st.slabs = static_cast<int>(slabs.size());
  st.device_store = pl.slab_mode && pl.device_store;
  st.filtered = jb.filter;
  st.hardware_interpolation = jb.mode == interp::hardware;
  st.budget_bytes = pl.budget;
  st.planned_bytes = pl.planned;
  st.fft_plans_created = plans_created;

  volume out;  // from out_pending, at the first download
  const std::int64_t plane = vg.nx * vg.ny;

  // Uploads slab s's header and row-shifted matrices (stream s_b), then lets s_f see them.
  const auto set_slab = [&](const slab_info& sl) {
    s_b.synchronize("finishing the previous slab");  // pinned host copies are reused
    bp_slab_header& h = *slab_host.data();
    h.nx = static_cast<int>(vg.nx);
    h.ny = static_cast<int>(vg.ny);
    h.nz = static_cast<int>(sl.nz);
    h.cols = static_cast<int>(C);
    h.rows_valid = sl.rows_valid;
    h.row_offset = sl.row_offset;
    const double oz = vg.origin_mm[2] + static_cast<double>(sl.z0) * vg.spacing_mm[2];
    h.ox = static_cast<float>(vg.origin_mm[0]);
    h.oy = static_cast<float>(vg.origin_mm[1]);
    h.oz = static_cast<float>(oz);
    h.sx = static_cast<float>(vg.spacing_mm[0]);
    h.sy = static_cast<float>(vg.spacing_mm[1]);
    h.sz = static_cast<float>(vg.spacing_mm[2]);
    if (curved)
      shifted_cyl_maps(maps_d, sl.row_offset, mats_host.data());
    else
      shifted_matrices(mats_d, sl.row_offset, mats_host.data());
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(slab_dev.data(), slab_host.data(), sizeof(bp_slab_header),
                                     cudaMemcpyHostToDevice, s_b));
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(mats_dev.data(), mats_host.data(), mats_host.bytes(),
                                     cudaMemcpyHostToDevice, s_b),
                     "uploading projection matrices");
    CTFORGE_CUDA_TRY(cudaMemsetAsync(cnt_b, 0, sizeof(int), s_b));
    CTFORGE_CUDA_TRY(cudaMemsetAsync(vol_dev.data(), 0,
                                     static_cast<std::size_t>(sl.nz * plane) * sizeof(float), s_b));
    ev_hdr.record(s_b);
    s_f.wait(ev_hdr);
    CTFORGE_CUDA_TRY(cudaMemsetAsync(cnt_f, 0, sizeof(int), s_f));
  };

  // Copies slab s of the device volume into `out` through the pinned staging buffers.
  const auto download = [&](const slab_info& sl) {
    const auto t0 = clock_type::now();
    const std::int64_t total = sl.nz * plane;
    const std::int64_t chunk = batch_floats;
    const std::int64_t n_chunks = (total + chunk - 1) / chunk;
    if (out.data.empty()) out = out_pending.get();
    float* dst = out.data.data() + sl.z0 * plane;
    const event* done[2] = {&ev_u[0], &ev_u[1]};
    const auto issue = [&](std::int64_t c) {
      const std::int64_t off = c * chunk, n = std::min(chunk, total - off);
      CTFORGE_CUDA_TRY(
          cudaMemcpyAsync(staging[c % 2]->data(), vol_dev.data() + off,
                          static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, s_b),
          "downloading the volume");
      done[c % 2]->record(s_b);
    };
    for (std::int64_t c = 0; c < std::min<std::int64_t>(2, n_chunks); ++c) issue(c);
    for (std::int64_t c = 0; c < n_chunks; ++c) {
      done[c % 2]->synchronize();
      const std::int64_t off = c * chunk, n = std::min(chunk, total - off);
      detail::parallel_copy(dst + off, staging[c % 2]->data(),
                            static_cast<std::size_t>(n) * sizeof(float), threads);
      if (c + 2 < n_chunks) issue(c + 2);
    }
    st.download_ms += ms_since(t0);
  };

  // Stage U: stage batch j on the host and upload it into raw[j % 2]. Page-locked input
  // (ctforge::pinned_host_range) is uploaded straight from the caller's memory.
  const bool input_locked =
      input_on_device ||
      host_range_page_locked(proj.data.data(), proj.data.size() * sizeof(float));
  st.input_page_locked = input_locked;
  const auto upload_batch = [&](int j) {
    const int p = j % 2;
    const std::int64_t v0 = static_cast<std::int64_t>(j) * B;
    const std::int64_t n = std::min<std::int64_t>(B, V - v0);
    const std::size_t bytes = static_cast<std::size_t>(n * R * C) * sizeof(float);
    const float* src = proj.view(v0);
    if (!input_locked) {
      if (j >= 2) ev_u[p].synchronize();  // U(j-2) has finished reading staging[p]
      detail::parallel_copy(staging[p]->data(), src, bytes, threads);
      src = staging[p]->data();
    }
    s_up.wait(ev_f[p]);  // F(j-2) has finished reading raw[p]
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(raw[p], src, bytes,
                                     input_on_device ? cudaMemcpyDeviceToDevice
                                                     : cudaMemcpyHostToDevice,
                                     s_up),
                     "uploading projections");
    ev_u[p].record(s_up);
  };

  // On an exception, let in-flight work finish before the graphs and buffers above are
  // destroyed (locals are destroyed in reverse order of declaration: this guard runs first).
  struct sync_on_unwind {
    const stream* streams[3];
    ~sync_on_unwind() {
      for (const stream* s : streams) cudaStreamSynchronize(s->get());
      cudaGetLastError();
    }
  } const unwind_guard{{&s_up, &s_f, &s_b}};

  // After every filter graph has run: a non-finite projection value is a usage error naming
  // its view, row and column (the CPU path's check_finite_values message), before any output.
  const auto check_values = [&] {
    if (!jb.filter) return;
    unsigned long long first = ~0ull;
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(&first, non_finite.data(), sizeof first, cudaMemcpyDeviceToHost, s_f),
        "reading the non-finite value flag");
    s_f.synchronize("reading the non-finite value flag");
    if (first != ~0ull) {
      // Device projections are not read on the host: fetch the one value for the message.
      float value = 0;
      const float* at = proj.data.data() + first;
      if (input_on_device)
        CTFORGE_CUDA_TRY(cudaMemcpy(&value, at, sizeof(float), cudaMemcpyDeviceToHost),
                         "reading a non-finite projection value");
      else
        value = *at;
      detail::throw_non_finite(proj, static_cast<std::int64_t>(first), value);
    }
  };

  // One pass over the batches. Stage 1 (stream s_f) is `first[p]`: filtering into the arrays,
  // filtering into the store, or gathering a slab's rows; with `upload`, batch j is first
  // staged and uploaded (stream s_up); with `backproject`, stage 2 (stream s_b) back-projects
  // what stage 1 left in array[p]. `stage` names stage 1 in errors. Returns the summed device
  // times of the two stages (ms).
  struct pass_times {
    double first_ms = 0, backproject_ms = 0;
  };
  const auto run_pass = [&](const std::vector<graph_exec>& first, const char* stage, bool upload,
                            bool backproject, double progress_from, double progress_to) {
    for (int j = 0; j < nb; ++j) {
      const int p = j % 2;
      const auto jj = static_cast<std::size_t>(j);
      if (upload) {
        upload_batch(j);
        s_f.wait(ev_u[p]);
      }
      if (backproject) s_f.wait(ev_b[p]);  // B(j-2) has finished reading array[p]
      t_filter.start[jj].record(s_f);
      first[static_cast<std::size_t>(p)].launch(s_f, stage);
      t_filter.stop[jj].record(s_f);
      ev_f[p].record(s_f);
      if (backproject) {
        s_b.wait(ev_f[p]);
        t_bp.start[jj].record(s_b);
        g_bp[static_cast<std::size_t>(p)].launch(s_b, "back-projection");
        t_bp.stop[jj].record(s_b);
        ev_b[p].record(s_b);
      }
      report(jb, progress_from + (progress_to - progress_from) * static_cast<double>(j + 1) / nb);
      if (cancel_requested(jb)) break;  // stop queueing; what is queued drains below
    }
    if (backproject)
      s_b.synchronize("back-projecting");  // s_b waited for every stage-1 launch
    else
      s_f.synchronize(stage);
    if (jb.cancel) jb.cancel->throw_if_requested();  // nothing in flight any more
    return pass_times{t_filter.sum_ms(nb), backproject ? t_bp.sum_ms(nb) : 0.0};
  };

  st.setup_ms = ms_since(t_start);
  const auto t_stream = clock_type::now();
  report(jb, 0.0);
  if (!pl.slab_mode) {
    set_slab(slabs[0]);
    const pass_times t =
        run_pass(g_filter, jb.filter ? "filter" : "projection copy", true, true, 0.0, 0.95);
    st.stream_ms = ms_since(t_stream);
    st.filter_ms = t.first_ms;
    st.backproject_ms = t.backproject_ms;
    check_values();
    if (!jb.device_out) download(slabs[0]);
  } else {
    // Phase 1: every view filtered once into the store.
    st.filter_ms =
        run_pass(g_filter, "filter (into the projection store)", true, false, 0.0, 0.1).first_ms;
    check_values();
    // Phase 2: per slab, the rows it needs into the arrays, then back-projection.
    for (std::size_t si = 0; si < slabs.size(); ++si) {
      const slab_info& sl = slabs[si];
      set_slab(sl);
      const double f0 = 0.1 + 0.9 * static_cast<double>(si) / static_cast<double>(slabs.size());
      const double f1 = 0.1 + 0.9 * static_cast<double>(si + 1) / static_cast<double>(slabs.size());
      const pass_times t = run_pass(g_gather, "slab row gather", false, true, f0, f1);
      st.gather_ms += t.first_ms;
      st.backproject_ms += t.backproject_ms;
      download(sl);
    }
    st.stream_ms = ms_since(t_stream) - st.download_ms;
  }
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_up));
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_f));
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_b));
  CTFORGE_CUDA_TRY(cudaGetLastError(), "finishing the reconstruction");
  if (jb.device_out) {
    std::vector<std::int64_t> shape{vg.nz, vg.ny, vg.nx};  // before ownership moves (may throw)
    *jb.device_out = device_array::adopt(vol_dev.release_ownership(), std::move(shape), copt.device);
  }
  st.total_ms = ms_since(t_start);
  g_last_stats = st;
  report(jb, 1.0);
  return out;
}

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

cuda_pipeline_stats cuda_last_pipeline_stats() {
  return kernels::cuda::g_last_stats;
}

void cuda_clear_fft_plan_cache() {
  kernels::cuda::clear_ramp_plan_cache();
}

std::size_t cuda_fft_plan_cache_size() {
  return kernels::cuda::ramp_plan_cache_statistics().size;
}

void cuda_clear_pinned_pool() {
  kernels::cuda::pinned_staging_pool().clear();
}

std::int64_t cuda_pinned_pool_held_bytes() {
  return static_cast<std::int64_t>(kernels::cuda::pinned_staging_pool().stats().held_bytes);
}

std::int64_t cuda_fft_work_bytes(std::int64_t padded_len, std::int64_t rows_total) {
  CTFORGE_EXPECTS(
      padded_len >= 2 && rows_total >= 1 && padded_len < (1 << 30) && rows_total < (1 << 30),
      "cuda_fft_work_bytes: invalid shape");
  return kernels::cuda::ramp_work_bytes(static_cast<int>(padded_len), static_cast<int>(rows_total));
}

volume cuda_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const fdk_job& job, const recon_options& opt, const cuda_options& copt,
                        device_array* device_out) {
  vg.validate();
  CTFORGE_EXPECTS(job.params.cols == proj.cols && job.params.rows == proj.rows &&
                      static_cast<std::int64_t>(job.views.size()) == proj.views &&
                      job.padded_len >= 2 * proj.cols &&
                      static_cast<std::int64_t>(job.response.size()) == job.padded_len / 2 + 1,
                  "cuda_reconstruct: the FDK job does not match the projections");
  kernels::cuda::job jb;
  jb.proj = &proj;
  jb.g = &g;
  jb.vg = vg;
  jb.filter = true;
  jb.setup = &job;
  jb.padded_len = job.padded_len;
  jb.response = job.response;
  jb.weighting = job.distance_weighting ? kernels::bp_weighting::fdk : kernels::bp_weighting::none;
  jb.mode =
      copt.gpu_hardware_interpolation ? kernels::cuda::interp::hardware : kernels::cuda::interp::exact;
  jb.threads = opt.threads;
  jb.progress = &opt.progress;
  jb.cancel = &opt.cancel;
  jb.device_out = device_out;
  return kernels::cuda::run_pipeline(jb, copt);
}

namespace {
volume back_project_job(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const cuda_options& copt, kernels::bp_weighting w) {
  g.validate();
  vg.validate();
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  "back-projection: projections are " + std::to_string(proj.views) + " views x " +
                      std::to_string(proj.rows) + " rows x " + std::to_string(proj.cols) +
                      " cols but the geometry has " + std::to_string(g.view_count()) + " x " +
                      std::to_string(g.rows) + " x " + std::to_string(g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  "back-projection: projection data size does not match its dimensions");
  kernels::cuda::job jb;
  jb.proj = &proj;
  jb.g = &g;
  jb.vg = vg;
  jb.filter = false;
  jb.weighting = w;
  jb.mode =
      copt.gpu_hardware_interpolation ? kernels::cuda::interp::hardware : kernels::cuda::interp::exact;
  return kernels::cuda::run_pipeline(jb, copt);
}
}  // namespace

volume cuda_back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                         const cuda_options& copt) {
  return back_project_job(proj, g, vg, copt, kernels::bp_weighting::none);
}

volume cuda_backproject_filtered(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, const cuda_options& copt,
                                 bool distance_weighting) {
  return back_project_job(
      proj, g, vg, copt,
      distance_weighting ? kernels::bp_weighting::fdk : kernels::bp_weighting::none);
}

}  // namespace ctforge::detail
