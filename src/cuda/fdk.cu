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
//  * When volume + batch buffers exceed the memory budget, the volume is split into slabs:
//    phase 1 filters every view once into a projection store (device memory when it fits,
//    else mapped pinned host memory); phase 2, per slab, gathers from the store only the
//    detector rows the slab projects onto (from its corners under all matrices) into the
//    texture array and back-projects with row-shifted matrices.
//
// The pieces, in the order run_pipeline uses them (all in this file unless named otherwise):
//  * job: what to compute (projections, geometry, pre-weights and ramp response when filtering).
//  * limits: projections_on_device, check_limits (texture and launch limits).
//  * pipeline_streams: the three stage streams.
//  * pipeline_plan / plan_pipeline: batches, slabs and the rows each needs, where the filtered
//    projections live, the per-view matrices (from make_pipeline_plan / make_slabs in
//    cuda_plan.cuh); also makes the ramp filter of the chosen batch (ramp_filter_gpu,
//    ramp_filter.cu).
//  * pipeline_resources: every event, buffer, array, texture and surface of the call, built from
//    the plan in one place (owners in cuda_raii.cuh, page-locked staging from pinned_pool.cuh),
//    and the per-call constants (upload_constants).
//  * pipeline_sequences / capture_graphs / pipeline_graphs: the per-batch work of each stage,
//    warmed up once and captured as one graph per buffer slot.
//  * pipeline_passes: the per-batch and per-slab steps (upload_batch, set_slab, run_pass,
//    check_values, download) and the two ways of running them (run_streaming, run_slabs).
//  * The kernels and their launchers (enqueue_*, declared in cuda_pipeline.cuh) live together:
//    preweight.cu, ramp_filter.cu, backproject.cu, pipeline_kernels.cu.
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
  device_array* device_out = nullptr;  // keep the volume on the device (no slabs)
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

/// An optional made, by `make()`, only when `cond` holds.
template <class F>
auto make_if(bool cond, F&& make) -> std::optional<decltype(make())> {
  std::optional<decltype(make())> o;
  if (cond) o.emplace(make());
  return o;
}

// ---- limits -------------------------------------------------------------------------------------

/// Whether the projections lie in GPU memory (a CuPy / PyTorch tensor: then copied batch by
/// batch on the device). Waits for their producer's queued work before the copies start.
bool projections_on_device(const projection_view& proj, int device) {
  bool input_on_device = false;
  if (proj.space == memory_space::cuda_device) {
    input_on_device = detail::cuda_pointer_on_device(proj.data.data(), device, "the projections");
    CTFORGE_EXPECTS(input_on_device,
                    "the projections are marked as GPU memory but CUDA does not know the pointer");
    // The producer's queued work (on streams of its own) completes before the copies start.
    CTFORGE_CUDA_TRY(cudaDeviceSynchronize(), "waiting for the device projections' producer");
  }
  return input_on_device;
}

/// Refuses detectors and volumes beyond the texture and launch limits; returns the most layers
/// of a layered texture (the largest batch).
int check_limits(const job& jb, int device) {
  const std::int64_t R = jb.proj->rows, C = jb.proj->cols;
  const volume_geometry& vg = jb.vg;
  int max_w = 0, max_h = 0, max_layers = 0;
  CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max_w, cudaDevAttrMaxTexture2DLayeredWidth, device));
  CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max_h, cudaDevAttrMaxTexture2DLayeredHeight, device));
  CTFORGE_CUDA_TRY(
      cudaDeviceGetAttribute(&max_layers, cudaDevAttrMaxTexture2DLayeredLayers, device));
  CTFORGE_EXPECTS(C <= max_w && R <= max_h && R <= 65535,
                  "CUDA backend: detector of " + std::to_string(C) + " x " + std::to_string(R) +
                      " pixels exceeds the layered texture limit (" + std::to_string(max_w) +
                      " x " + std::to_string(std::min(max_h, 65535)) + ")");
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 31) / 32 && vg.ny < 65535 * 4 && vg.nz < 65535 * 8,
                  "CUDA backend: volume of " + std::to_string(vg.nx) + " x " +
                      std::to_string(vg.ny) + " x " + std::to_string(vg.nz) +
                      " voxels exceeds the launch limits");
  return max_layers;
}

/// The streams of the three stages: upload (up), filter (f), back-projection (b).
struct pipeline_streams {
  stream up{0}, f{0}, b{0};
};

// ---- the plan -----------------------------------------------------------------------------------

/// What one call does where: views per batch and batches, the slabs and the detector rows
/// each needs, where the filtered projections live (pl.device_store), the per-view matrices.
struct pipeline_plan {
  plan pl;  ///< make_pipeline_plan (cuda_plan.cuh)
  std::int64_t V = 0, R = 0, C = 0;
  int B = 0;   ///< views per batch
  int nb = 0;  ///< batches
  std::int64_t batch_floats = 0;
  /// Flat detectors: projection matrices; cylindrical ones: kernels::cyl_map (the same 12
  /// floats per view in the back-projector's constant memory, read by its curved variant).
  bool curved = false;
  std::vector<projection_matrix> mats_d;
  std::vector<cyl_map_d> maps_d;
  std::vector<slab_info> slabs;  ///< make_slabs (cuda_plan.cuh)
  std::int64_t array_rows = 0;   ///< detector rows of the texture arrays
  int plans_created = 0;         ///< cuFFT plans made while planning
};

/// Plans the call. The plan is made with the real cuFFT work area of the batch sizes it
/// considers: `filter` is the ramp filter of the chosen batch on return (when jb.filter; plans
/// are cached per shape, so the filter finally used is planned at most once).
pipeline_plan plan_pipeline(const job& jb, const detail::cuda_options& copt, int max_layers,
                            cudaStream_t s_f, std::optional<ramp_filter_gpu>& filter) {
  const volume_geometry& vg = jb.vg;
  pipeline_plan pp;
  pp.V = jb.proj->views;
  pp.R = jb.proj->rows;
  pp.C = jb.proj->cols;
  const std::int64_t V = pp.V, R = pp.R, C = pp.C;
  CTFORGE_EXPECTS(copt.views_per_batch >= 0, "views per batch must be >= 0");
  const std::int64_t budget = device_memory_budget(copt.gpu_memory_limit_bytes);
  plan_input pin = make_plan_input(V, R, C, vg, jb.filter, jb.padded_len);
  pin.requested_batch = copt.views_per_batch;
  pin.max_batch = max_layers;
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
                      " voxels need slabs within the memory limit (use host output)");
  pp.pl = pl;
  pp.plans_created = plans_created;
  pp.B = pl.views_per_batch;
  pp.nb = pl.batches;
  pp.batch_floats = static_cast<std::int64_t>(pp.B) * R * C;
  const geometry& g = *jb.g;
  pp.curved = g.curved();
  pp.mats_d = pp.curved ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  pp.maps_d = pp.curved ? cylinder_maps_d(g) : std::vector<cyl_map_d>{};

  // Slabs and the detector rows each needs.
  pp.slabs = make_slabs(pl, vg, pp.mats_d, R, pp.curved ? &pp.maps_d : nullptr);
  int max_rows_valid = 0;
  for (const auto& s : pp.slabs) max_rows_valid = std::max(max_rows_valid, s.rows_valid);
  pp.array_rows = pl.slab_mode ? std::min<std::int64_t>(R, max_rows_valid + 1) : R;
  return pp;
}

// ---- the resources ------------------------------------------------------------------------------

/// Synchronisation events of the two buffer slots: upload (u), stage 1 (f), back-projection (b).
struct slot_events {
  std::vector<event> u, f, b;
  slot_events() {
    for (int p = 0; p < 2; ++p) {
      u.emplace_back(false);
      f.emplace_back(false);
      b.emplace_back(false);
    }
  }
};

/// Everything the pipeline allocates or creates, in one place, from the plan: allocated in the
/// order of the members, freed on return or throw in the reverse order. Index p is the buffer
/// slot (batch j uses slot j % 2).
struct pipeline_resources {
  pipeline_resources(const job& jb, const pipeline_plan& pp,
                     const std::optional<ramp_filter_gpu>& filter_)
      : filter(filter_),
        t_filter(pp.nb),
        t_bp(pp.nb),
        // Page-locked staging from the process-wide pool (pinning is slow; see pinned_pool.cuh).
        staging0(lease_pinned(static_cast<std::size_t>(pp.batch_floats), "projection staging",
                              &pinned_allocated)),
        staging1(lease_pinned(static_cast<std::size_t>(pp.batch_floats), "projection staging",
                              &pinned_allocated)),
        raw0(static_cast<std::size_t>(pp.batch_floats), "a batch of projections"),
        raw1(static_cast<std::size_t>(pp.batch_floats), "a batch of projections"),
        pitch(jb.filter ? filter->pitch() : static_cast<int>(pp.C)),
        fft_rows(make_if(jb.filter,
                         [&] {
                           return device_buffer<float>(static_cast<std::size_t>(pp.B) *
                                                           static_cast<std::size_t>(pp.R) *
                                                           static_cast<std::size_t>(pitch),
                                                       "the FFT row buffer");
                         })),
        fft_work(make_if(jb.filter,
                         [&] {
                           device_buffer<float> w(std::max<std::size_t>(filter->work_bytes(), 1),
                                                  "the cuFFT work area");
                           filter->set_work_area(w.data());
                           return w;
                         })),
        arr0(cuda_array::kind::layered_2d, pp.C, pp.array_rows, pp.B, pp.pl.slab_mode,
             "filtered projections"),
        arr1(cuda_array::kind::layered_2d, pp.C, pp.array_rows, pp.B, pp.pl.slab_mode,
             "filtered projections"),
        tex_lin0(arr0, true),
        tex_lin1(arr1, true),
        tex_pt0(arr0, false),
        tex_pt1(arr1, false),
        surf0(make_if(pp.pl.slab_mode, [&] { return surface_object(arr0); })),
        surf1(make_if(pp.pl.slab_mode, [&] { return surface_object(arr1); })),
        vol_dev(static_cast<std::size_t>(jb.vg.nx * jb.vg.ny * pp.pl.slab_nz), "the volume"),
        counters(2, "batch counters"),
        non_finite(1, "the non-finite value flag"),
        bp_staging(1, "back-projection constants"),
        slab_dev(1, "slab header"),
        mats_dev(static_cast<std::size_t>(pp.V), "projection matrices"),
        pw_dev(make_if(jb.filter,
                       [&] {
                         return device_buffer<preweight_view>(static_cast<std::size_t>(pp.V),
                                                              "pre-weights");
                       })),
        mats_host(static_cast<std::size_t>(pp.V), "projection matrices"),
        slab_host(1, "slab header"),
        store_dev(make_if(pp.pl.slab_mode && pp.pl.device_store,
                          [&] { return device_buffer<float>(store_floats(pp), store_what); })),
        store_host(make_if(pp.pl.slab_mode && !pp.pl.device_store,
                           [&] { return pinned_buffer<float>(store_floats(pp), store_what); })) {
    if (store_dev) store = store_dev->data();
    if (store_host) store = store_host->device_pointer();
  }

  /// Per-call constants, in stream `s`: the pre-weights, zeroed raw batches and counters.
  void upload_constants(const job& jb, const pipeline_plan& pp, cudaStream_t s) const {
    if (jb.filter)
      CTFORGE_CUDA_TRY(cudaMemcpyAsync(pw_dev->data(), jb.setup->views.data(),
                                       static_cast<std::size_t>(pp.V) * sizeof(preweight_view),
                                       cudaMemcpyHostToDevice, s),
                       "uploading the pre-weights");
    CTFORGE_CUDA_TRY(cudaMemsetAsync(raw(0), 0, raw0.bytes(), s));
    CTFORGE_CUDA_TRY(cudaMemsetAsync(raw(1), 0, raw1.bytes(), s));
    CTFORGE_CUDA_TRY(cudaMemsetAsync(counters.data(), 0, counters.bytes(), s));
  }

  const pinned_buffer<float>& staging(std::int64_t p) const {
    return p == 0 ? staging0.get() : staging1.get();
  }
  float* raw(int p) const { return p == 0 ? raw0.data() : raw1.data(); }
  const cuda_array& array(int p) const { return p == 0 ? arr0 : arr1; }
  const texture_object& tex_lin(int p) const { return p == 0 ? tex_lin0 : tex_lin1; }
  const texture_object& tex_pt(int p) const { return p == 0 ? tex_pt0 : tex_pt1; }
  cudaSurfaceObject_t surface(int p) const { return (p == 0 ? surf0 : surf1)->get(); }
  int* cnt_f() const { return counters.data(); }
  int* cnt_b() const { return counters.data() + 1; }

  static std::size_t store_floats(const pipeline_plan& pp) {
    return static_cast<std::size_t>(pp.V * pp.R * pp.C);
  }
  static constexpr const char* store_what = "the filtered projection store";

  const std::optional<ramp_filter_gpu>& filter;  // made by plan_pipeline
  const event ev_hdr{false};
  const slot_events ev;
  stage_timer t_filter, t_bp;
  std::int64_t pinned_allocated = 0;  // bytes the two leases below pinned anew
  pinned_pool::lease staging0, staging1;
  device_buffer<float> raw0, raw1;  // the raw batches
  const int pitch;                  // floats per row of what stage 1 reads
  std::optional<device_buffer<float>> fft_rows, fft_work;
  cuda_array arr0, arr1;  // filtered projections, read through the textures
  const texture_object tex_lin0, tex_lin1, tex_pt0, tex_pt1;
  std::optional<surface_object> surf0, surf1;  // slab mode: the row gather writes the arrays
  device_buffer<float> vol_dev;                // the volume (slab)
  device_buffer<int> counters;                 // batch counters of stage 1 and 2
  // Linear index of the first non-finite projection value the pre-weighting read (~0: none).
  device_buffer<unsigned long long> non_finite;
  device_buffer<bp_constants> bp_staging;
  device_buffer<bp_slab_header> slab_dev;
  device_buffer<proj_matrix> mats_dev;
  std::optional<device_buffer<preweight_view>> pw_dev;
  // Host-side slab header + matrices, uploaded per slab.
  pinned_buffer<proj_matrix> mats_host;
  pinned_buffer<bp_slab_header> slab_host;
  // Slab mode: every filtered view, in device memory or mapped pinned host memory.
  std::optional<device_buffer<float>> store_dev;
  std::optional<pinned_buffer<float>> store_host;
  float* store = nullptr;
};

// ---- the captured sequences and their graphs ----------------------------------------------------

/// The per-batch work each graph holds, issued into stream `s` for buffer slot `p`.
struct pipeline_sequences {
  const job& jb;
  const pipeline_plan& pp;
  const pipeline_resources& r;

  cudaMemcpy3DParms upload_params(int p) const {
    return r.array(p).copy_from(jb.filter ? r.fft_rows->data() : r.raw(p),
                                static_cast<std::size_t>(r.pitch) * sizeof(float), pp.C, pp.R, pp.B,
                                0, cudaMemcpyDeviceToDevice);
  }
  void pad_and_filter(cudaStream_t s, int p) const {
    preweight_batch pb{};
    pb.raw = r.raw(p);
    pb.out = r.fft_rows->data();
    pb.views = r.pw_dev->data();
    pb.counter = r.cnt_f();
    pb.first_non_finite = r.non_finite.data();
    pb.params = jb.setup->params;
    pb.views_per_batch = pp.B;
    pb.total_views = static_cast<int>(pp.V);
    pb.cols = static_cast<int>(pp.C);
    pb.rows = static_cast<int>(pp.R);
    pb.padded_len = jb.padded_len;
    pb.pitch = r.pitch;
    enqueue_preweight(s, pb, true);
    r.filter->enqueue(s, r.fft_rows->data());
  }
  // Streaming: filtered batch into array[p].
  void filter_to_array(cudaStream_t s, int p) const {
    if (jb.filter) pad_and_filter(s, p);
    const cudaMemcpy3DParms cp = upload_params(p);
    CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s), "copying projections into the texture array");
    enqueue_bump(s, r.cnt_f());
  }
  // Slab phase 1: filtered batch into the store.
  void filter_to_store(cudaStream_t s, int p) const {
    if (jb.filter) pad_and_filter(s, p);
    store_batch sb{};
    sb.src = jb.filter ? r.fft_rows->data() : r.raw(p);
    sb.store = r.store;
    sb.counter = r.cnt_f();
    sb.views_per_batch = pp.B;
    sb.total_views = static_cast<int>(pp.V);
    sb.cols = static_cast<int>(pp.C);
    sb.rows = static_cast<int>(pp.R);
    sb.src_pitch = r.pitch;
    enqueue_store(s, sb);
    enqueue_bump(s, r.cnt_f());
  }
  // Slab phase 2: rows of the slab from the store into array[p].
  void gather(cudaStream_t s, int p) const {
    gather_batch gb{};
    gb.store = r.store;
    gb.surface = r.surface(p);
    gb.slab = r.slab_dev.data();
    gb.counter = r.cnt_f();
    gb.views_per_batch = pp.B;
    gb.total_views = static_cast<int>(pp.V);
    gb.cols = static_cast<int>(pp.C);
    gb.rows = static_cast<int>(pp.R);
    gb.array_rows = static_cast<int>(pp.array_rows);
    enqueue_gather(s, gb);
    enqueue_bump(s, r.cnt_f());
  }
  void backproject(cudaStream_t s, int p) const {
    bp_sources src{};
    src.slab = r.slab_dev.data();
    src.matrices = r.mats_dev.data();
    src.counter = r.cnt_b();
    src.staging = r.bp_staging.data();
    src.views_per_batch = pp.B;
    src.total_views = static_cast<int>(pp.V);
    enqueue_backprojection(s, jb.weighting, jb.mode, src, r.tex_lin(p).get(), r.tex_pt(p).get(),
                           r.vol_dev.data(), static_cast<int>(jb.vg.nx), static_cast<int>(jb.vg.ny),
                           static_cast<int>(pp.pl.slab_nz), pp.curved);
    enqueue_bump(s, r.cnt_b());
  }
};

/// One instantiated graph per buffer slot and stage: stage 1 (filtering into the arrays or
/// into the store), back-projection, and in slab mode the row gather.
struct pipeline_graphs {
  std::vector<graph_exec> filter, bp, gather;
};

/// Warms up, then captures the graphs (stage 1 in s_f, back-projection in s_b).
pipeline_graphs capture_graphs(const pipeline_sequences& seq, const pipeline_streams& sm) {
  const job& jb = seq.jb;
  const pipeline_resources& r = seq.r;
  const bool slab_mode = seq.pp.pl.slab_mode;
  // Warm-up outside capture: loads every kernel and lets cuFFT finish any lazy initialisation
  // (nothing may allocate or load modules while a stream is being captured).
  preload_backprojection_kernels();
  preload_pipeline_kernels();
  if (jb.filter) seq.pad_and_filter(sm.f, 0);
  CTFORGE_CUDA_TRY(cudaMemsetAsync(r.counters.data(), 0, r.counters.bytes(), sm.f));
  CTFORGE_CUDA_TRY(cudaMemsetAsync(r.non_finite.data(), 0xFF, r.non_finite.bytes(), sm.f));
  sm.f.synchronize("warming up the filter");

  pipeline_graphs gs;
  for (int p = 0; p < 2; ++p) {
    const graph gf = graph::capture(sm.f, [&](cudaStream_t s) {
      if (!slab_mode)
        seq.filter_to_array(s, p);
      else
        seq.filter_to_store(s, p);
    });
    gs.filter.emplace_back(gf);
    const graph gb = graph::capture(sm.b, [&](cudaStream_t s) { seq.backproject(s, p); });
    gs.bp.emplace_back(gb);
  }
  if (slab_mode)
    for (int p = 0; p < 2; ++p) {
      const graph gg = graph::capture(sm.f, [&](cudaStream_t s) { seq.gather(s, p); });
      gs.gather.emplace_back(gg);
    }
  return gs;
}

/// The statistics known before the passes run.
detail::cuda_pipeline_stats initial_stats(const job& jb, const pipeline_plan& pp,
                                          const pipeline_resources& r) {
  detail::cuda_pipeline_stats st;
  st.views_per_batch = pp.B;
  st.batches = pp.nb;
  st.pinned_bytes_allocated = r.pinned_allocated;
  st.slabs = static_cast<int>(pp.slabs.size());
  st.device_store = pp.pl.slab_mode && pp.pl.device_store;
  st.filtered = jb.filter;
  st.hardware_interpolation = jb.mode == interp::hardware;
  st.budget_bytes = pp.pl.budget;
  st.planned_bytes = pp.pl.planned;
  st.fft_plans_created = pp.plans_created;
  return st;
}

// ---- the passes ---------------------------------------------------------------------------------

/// The per-batch and per-slab steps over the resources and graphs, and the two ways of running
/// them: the whole volume at once (streaming) or slab by slab.
class pipeline_passes {
 public:
  pipeline_passes(const job& jb, const pipeline_plan& pp, const pipeline_resources& r,
                  const pipeline_streams& sm, const pipeline_graphs& gs,
                  detail::cuda_pipeline_stats& st, volume& out, std::future<volume>& out_pending,
                  bool input_on_device)
      : jb_(jb),
        pp_(pp),
        r_(r),
        sm_(sm),
        gs_(gs),
        st_(st),
        out_(out),
        out_pending_(out_pending),
        input_on_device_(input_on_device),
        // Page-locked input (ctforge::pinned_host_range) is uploaded straight from the
        // caller's memory.
        input_locked_(
            input_on_device ||
            host_range_page_locked(jb.proj->data.data(), jb.proj->data.size() * sizeof(float))) {
    st_.input_page_locked = input_locked_;
  }

  /// The whole volume on the device: one pass filters and back-projects every batch.
  void run_streaming(clock_type::time_point t_stream) {
    set_slab(pp_.slabs[0]);
    const pass_times t =
        run_pass(gs_.filter, jb_.filter ? "filter" : "projection copy", true, true, 0.0, 0.95);
    st_.stream_ms = ms_since(t_stream);
    st_.filter_ms = t.first_ms;
    st_.backproject_ms = t.backproject_ms;
    check_values();
    if (!jb_.device_out) download(pp_.slabs[0]);
  }

  /// Slabs: phase 1 filters every view once into the store; phase 2, per slab, gathers the
  /// rows it needs into the arrays and back-projects them.
  void run_slabs(clock_type::time_point t_stream) {
    st_.filter_ms =
        run_pass(gs_.filter, "filter (into the projection store)", true, false, 0.0, 0.1).first_ms;
    check_values();
    const std::vector<slab_info>& slabs = pp_.slabs;
    for (std::size_t si = 0; si < slabs.size(); ++si) {
      const slab_info& sl = slabs[si];
      set_slab(sl);
      const double f0 = 0.1 + 0.9 * static_cast<double>(si) / static_cast<double>(slabs.size());
      const double f1 = 0.1 + 0.9 * static_cast<double>(si + 1) / static_cast<double>(slabs.size());
      const pass_times t = run_pass(gs_.gather, "slab row gather", false, true, f0, f1);
      st_.gather_ms += t.first_ms;
      st_.backproject_ms += t.backproject_ms;
      download(sl);
    }
    st_.stream_ms = ms_since(t_stream) - st_.download_ms;
  }

 private:
  struct pass_times {
    double first_ms = 0, backproject_ms = 0;
  };

  /// Uploads slab sl's header and row-shifted matrices (stream s_b), then lets s_f see them.
  void set_slab(const slab_info& sl) const {
    const volume_geometry& vg = jb_.vg;
    sm_.b.synchronize("finishing the previous slab");  // pinned host copies are reused
    bp_slab_header& h = *r_.slab_host.data();
    h.nx = static_cast<int>(vg.nx);
    h.ny = static_cast<int>(vg.ny);
    h.nz = static_cast<int>(sl.nz);
    h.cols = static_cast<int>(pp_.C);
    h.rows_valid = sl.rows_valid;
    h.row_offset = sl.row_offset;
    const double oz = vg.origin_mm[2] + static_cast<double>(sl.z0) * vg.spacing_mm[2];
    h.ox = static_cast<float>(vg.origin_mm[0]);
    h.oy = static_cast<float>(vg.origin_mm[1]);
    h.oz = static_cast<float>(oz);
    h.sx = static_cast<float>(vg.spacing_mm[0]);
    h.sy = static_cast<float>(vg.spacing_mm[1]);
    h.sz = static_cast<float>(vg.spacing_mm[2]);
    if (pp_.curved)
      shifted_cyl_maps(pp_.maps_d, sl.row_offset, r_.mats_host.data());
    else
      shifted_matrices(pp_.mats_d, sl.row_offset, r_.mats_host.data());
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(r_.slab_dev.data(), r_.slab_host.data(),
                                     sizeof(bp_slab_header), cudaMemcpyHostToDevice, sm_.b));
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(r_.mats_dev.data(), r_.mats_host.data(), r_.mats_host.bytes(),
                                     cudaMemcpyHostToDevice, sm_.b),
                     "uploading projection matrices");
    CTFORGE_CUDA_TRY(cudaMemsetAsync(r_.cnt_b(), 0, sizeof(int), sm_.b));
    CTFORGE_CUDA_TRY(cudaMemsetAsync(
        r_.vol_dev.data(), 0, static_cast<std::size_t>(sl.nz * plane()) * sizeof(float), sm_.b));
    r_.ev_hdr.record(sm_.b);
    sm_.f.wait(r_.ev_hdr);
    CTFORGE_CUDA_TRY(cudaMemsetAsync(r_.cnt_f(), 0, sizeof(int), sm_.f));
  }

  /// Copies slab sl of the device volume into the output through the pinned staging buffers.
  void download(const slab_info& sl) {
    const auto t0 = clock_type::now();
    const std::int64_t total = sl.nz * plane();
    const std::int64_t chunk = pp_.batch_floats;
    const std::int64_t n_chunks = (total + chunk - 1) / chunk;
    if (out_.data.empty()) out_ = out_pending_.get();
    float* dst = out_.data.data() + sl.z0 * plane();
    const event* done[2] = {&r_.ev.u[0], &r_.ev.u[1]};
    const auto issue = [&](std::int64_t c) {
      const std::int64_t off = c * chunk, n = std::min(chunk, total - off);
      CTFORGE_CUDA_TRY(cudaMemcpyAsync(r_.staging(c % 2).data(), r_.vol_dev.data() + off,
                                       static_cast<std::size_t>(n) * sizeof(float),
                                       cudaMemcpyDeviceToHost, sm_.b),
                       "downloading the volume");
      done[c % 2]->record(sm_.b);
    };
    for (std::int64_t c = 0; c < std::min<std::int64_t>(2, n_chunks); ++c) issue(c);
    for (std::int64_t c = 0; c < n_chunks; ++c) {
      done[c % 2]->synchronize();
      const std::int64_t off = c * chunk, n = std::min(chunk, total - off);
      detail::parallel_copy(dst + off, r_.staging(c % 2).data(),
                            static_cast<std::size_t>(n) * sizeof(float), jb_.threads);
      if (c + 2 < n_chunks) issue(c + 2);
    }
    st_.download_ms += ms_since(t0);
  }

  /// Stage U: stages batch j on the host and uploads it into raw[j % 2].
  void upload_batch(int j) const {
    const projection_view& proj = *jb_.proj;
    const int p = j % 2;
    const std::int64_t v0 = static_cast<std::int64_t>(j) * pp_.B;
    const std::int64_t n = std::min<std::int64_t>(pp_.B, pp_.V - v0);
    const std::size_t bytes = static_cast<std::size_t>(n * pp_.R * pp_.C) * sizeof(float);
    const float* src = proj.view(v0);
    if (!input_locked_) {
      if (j >= 2) r_.ev.u[p].synchronize();  // U(j-2) has finished reading staging[p]
      detail::parallel_copy(r_.staging(p).data(), src, bytes, jb_.threads);
      src = r_.staging(p).data();
    }
    sm_.up.wait(r_.ev.f[p]);  // F(j-2) has finished reading raw[p]
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(r_.raw(p), src, bytes,
                        input_on_device_ ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                        sm_.up),
        "uploading projections");
    r_.ev.u[p].record(sm_.up);
  }

  /// After every filter graph has run: a non-finite projection value is a usage error naming
  /// its view, row and column (the CPU path's check_finite_values message), before any output.
  void check_values() const {
    if (!jb_.filter) return;
    const projection_view& proj = *jb_.proj;
    unsigned long long first = ~0ull;
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(&first, r_.non_finite.data(), sizeof first, cudaMemcpyDeviceToHost, sm_.f),
        "reading the non-finite value flag");
    sm_.f.synchronize("reading the non-finite value flag");
    if (first != ~0ull) {
      // Device projections are not read on the host: fetch the one value for the message.
      float value = 0;
      const float* at = proj.data.data() + first;
      if (input_on_device_)
        CTFORGE_CUDA_TRY(cudaMemcpy(&value, at, sizeof(float), cudaMemcpyDeviceToHost),
                         "reading a non-finite projection value");
      else
        value = *at;
      detail::throw_non_finite(proj, static_cast<std::int64_t>(first), value);
    }
  }

  /// One pass over the batches. Stage 1 (stream s_f) is `first[p]`: filtering into the arrays,
  /// filtering into the store, or gathering a slab's rows; with `upload`, batch j is first
  /// staged and uploaded (stream s_up); with `backproject`, stage 2 (stream s_b) back-projects
  /// what stage 1 left in array[p]. `stage` names stage 1 in errors. Returns the summed device
  /// times of the two stages (ms).
  pass_times run_pass(const std::vector<graph_exec>& first, const char* stage, bool upload,
                      bool backproject, double progress_from, double progress_to) const {
    const int nb = pp_.nb;
    for (int j = 0; j < nb; ++j) {
      const int p = j % 2;
      const auto jj = static_cast<std::size_t>(j);
      if (upload) {
        upload_batch(j);
        sm_.f.wait(r_.ev.u[p]);
      }
      if (backproject) sm_.f.wait(r_.ev.b[p]);  // B(j-2) has finished reading array[p]
      r_.t_filter.start[jj].record(sm_.f);
      first[static_cast<std::size_t>(p)].launch(sm_.f, stage);
      r_.t_filter.stop[jj].record(sm_.f);
      r_.ev.f[p].record(sm_.f);
      if (backproject) {
        sm_.b.wait(r_.ev.f[p]);
        r_.t_bp.start[jj].record(sm_.b);
        gs_.bp[static_cast<std::size_t>(p)].launch(sm_.b, "back-projection");
        r_.t_bp.stop[jj].record(sm_.b);
        r_.ev.b[p].record(sm_.b);
      }
      report(jb_, progress_from + (progress_to - progress_from) * static_cast<double>(j + 1) / nb);
      if (cancel_requested(jb_)) break;  // stop queueing; what is queued drains below
    }
    if (backproject)
      sm_.b.synchronize("back-projecting");  // s_b waited for every stage-1 launch
    else
      sm_.f.synchronize(stage);
    if (jb_.cancel) jb_.cancel->throw_if_requested();  // nothing in flight any more
    return pass_times{r_.t_filter.sum_ms(nb), backproject ? r_.t_bp.sum_ms(nb) : 0.0};
  }

  std::int64_t plane() const { return jb_.vg.nx * jb_.vg.ny; }

  const job& jb_;
  const pipeline_plan& pp_;
  const pipeline_resources& r_;
  const pipeline_streams& sm_;
  const pipeline_graphs& gs_;
  detail::cuda_pipeline_stats& st_;
  volume& out_;  // from out_pending_, at the first download
  std::future<volume>& out_pending_;
  const bool input_on_device_;
  const bool input_locked_;
};

/// On an exception, lets in-flight work finish before the graphs and buffers are destroyed
/// (declared after them, it is destroyed first).
struct sync_on_unwind {
  const stream* streams[3];
  ~sync_on_unwind() {
    for (const stream* s : streams) cudaStreamSynchronize(s->get());
    cudaGetLastError();
  }
};

volume run_pipeline(const job& jb, const detail::cuda_options& copt) {
  const auto t_start = clock_type::now();
  std::lock_guard<std::mutex> lock(backend_mutex());
  detail::require_cuda_device(copt.device);
  const device_guard guard(copt.device);

  // The output volume's zero-filled host allocation (page faults on first touch: about 0.1 to
  // 0.5 s for 512^3) is made on another thread while the GPU works; download() takes it over.
  std::future<volume> out_pending = std::async(
      std::launch::async,
      [vg = jb.vg, keep = jb.device_out != nullptr] { return keep ? volume{} : volume(vg); });
  const bool input_on_device = projections_on_device(*jb.proj, copt.device);
  const int max_layers = check_limits(jb, copt.device);
  const pipeline_streams sm;

  std::optional<ramp_filter_gpu> filter;
  const pipeline_plan pp = plan_pipeline(jb, copt, max_layers, sm.f, filter);
  pipeline_resources r(jb, pp, filter);  // all allocated here, freed on return or throw
  r.upload_constants(jb, pp, sm.f);
  const pipeline_sequences seq{jb, pp, r};
  const pipeline_graphs gs = capture_graphs(seq, sm);

  detail::cuda_pipeline_stats st = initial_stats(jb, pp, r);
  volume out;  // from out_pending, at the first download
  pipeline_passes passes(jb, pp, r, sm, gs, st, out, out_pending, input_on_device);
  const sync_on_unwind unwind_guard{{&sm.up, &sm.f, &sm.b}};

  st.setup_ms = ms_since(t_start);
  const auto t_stream = clock_type::now();
  report(jb, 0.0);
  if (!pp.pl.slab_mode)
    passes.run_streaming(t_stream);
  else
    passes.run_slabs(t_stream);
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(sm.up));
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(sm.f));
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(sm.b));
  CTFORGE_CUDA_TRY(cudaGetLastError(), "finishing the reconstruction");
  if (jb.device_out) {
    // Made before ownership moves (may throw).
    std::vector<std::int64_t> shape{jb.vg.nz, jb.vg.ny, jb.vg.nx};
    *jb.device_out =
        device_array::adopt(r.vol_dev.release_ownership(), std::move(shape), copt.device);
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
