// Device-memory plan of the GPU reconstruction pipeline (src/cuda/fdk.cu): views per batch,
// whether the volume is split into slabs, where the filtered projections are kept in slab
// mode, and the detector rows each slab needs. Plain host C++ (no CUDA types), so the CPU test
// suite checks these decisions on machines without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "math/slab_rows.hpp"

namespace ctforge::kernels::cuda {

inline constexpr std::int64_t k_mib = std::int64_t{1} << 20;
/// Most views per batch (their matrices fill the __constant__ block of the back-projector).
inline constexpr int k_max_batch_views = 1024;
/// Upper bound on the back-projector's constant block (checked with static_assert there).
inline constexpr std::int64_t k_bp_constants_bytes = 50 * 1024;

/// Sizes the plan depends on.
struct plan_input {
  std::int64_t views = 0, rows = 0, cols = 0;  ///< projections
  std::int64_t nx = 0, ny = 0, nz = 0;         ///< volume
  bool filter = false;                         ///< FDK / FBP (FFT buffers needed)
  std::int64_t padded_len = 0;                 ///< FFT length when filter
  int requested_batch = 0;                     ///< cuda_options::views_per_batch (0 = auto)
  int max_batch = k_max_batch_views;           ///< device limit on array layers
};

/// plan_input for `views` projections of rows x cols into the grid `vg`; padded_len is the FFT
/// length when `filter` (FDK / FBP), ignored otherwise.
inline plan_input make_plan_input(std::int64_t views, std::int64_t rows, std::int64_t cols,
                                  const volume_geometry& vg, bool filter,
                                  std::int64_t padded_len = 0) {
  plan_input in;
  in.views = views;
  in.rows = rows;
  in.cols = cols;
  in.nx = vg.nx;
  in.ny = vg.ny;
  in.nz = vg.nz;
  in.filter = filter;
  in.padded_len = filter ? padded_len : 0;
  return in;
}

struct plan {
  int views_per_batch = 1;
  int batches = 1;
  bool slab_mode = false;     ///< volume split into slabs of slab_nz planes
  bool device_store = false;  ///< slab mode: filtered projections kept in device memory
  std::int64_t slab_nz = 0;
  std::int64_t budget = 0;   ///< bytes the plan had to fit in
  std::int64_t planned = 0;  ///< bytes it allocates (estimate, see batch_bytes)
};

/// Floats per row of the in-place R2C buffer for FFT length n.
inline std::int64_t fft_pitch(std::int64_t n) {
  return 2 * (n / 2 + 1);
}

/// Bytes of a float cudaArray of cols x rows x layers, with an allowance for row padding.
inline std::int64_t array_bytes(std::int64_t cols, std::int64_t rows, std::int64_t layers) {
  const std::int64_t b = cols * rows * layers * 4;
  return b + b / 16 + 2 * k_mib;
}

/// Device bytes of everything but the volume (slab) and the projection store, for B views per
/// batch: two raw batches, the FFT rows and work area, two texture arrays, per-view constants.
inline std::int64_t batch_bytes(const plan_input& in, std::int64_t B, std::int64_t fft_work) {
  std::int64_t b = 2 * B * in.rows * in.cols * 4;
  if (in.filter) b += B * in.rows * fft_pitch(in.padded_len) * 4 + fft_work;
  b += 2 * array_bytes(in.cols, in.rows, B);
  b += in.views * (48 + 16);  // float matrices + pre-weight records
  b += k_bp_constants_bytes + 4 * k_mib;
  return b;
}

/// cuFFT work area estimate before the plans exist: 1D batched transforms need at most about
/// the size of their data.
inline std::int64_t fft_work_estimate(const plan_input& in, std::int64_t B) {
  return in.filter ? B * in.rows * fft_pitch(in.padded_len) * 4 : 0;
}

inline std::string format_mib(std::int64_t bytes) {
  return std::to_string((bytes + k_mib - 1) / k_mib) + " MiB";
}

/// The batch size planning starts from: the requested one (auto: 32), clamped to the views, the
/// constant-memory limit and the device's layer limit.
inline int initial_batch(const plan_input& in) {
  std::int64_t B = in.requested_batch > 0 ? in.requested_batch : 32;
  B = std::min<std::int64_t>(
      {B, std::max<std::int64_t>(in.views, 1), k_max_batch_views, std::max(in.max_batch, 1)});
  return static_cast<int>(std::max<std::int64_t>(B, 1));
}

/// Chooses the batch size and the slab split for a budget of `budget` bytes. fft_work < 0:
/// estimate the cuFFT work area; otherwise use it for every batch size tried. The batch starts
/// at the requested size (auto: 32), halves until the buffers fit, and the volume is split
/// when whole it does not fit next to them. Slab mode keeps the filtered projections on the
/// device when that still leaves room for max(min(nz, 8), min(nz / 4, 32)) planes. Throws
/// ctforge::error (with the sizes and the --gpu-memory-limit hint) when even one view and 8 planes
/// do not fit.
inline plan make_plan(const plan_input& in, std::int64_t budget, std::int64_t fft_work = -1) {
  CTFORGE_EXPECTS(
      in.views >= 1 && in.rows >= 1 && in.cols >= 1 && in.nx >= 1 && in.ny >= 1 && in.nz >= 1,
      "CUDA plan: empty projections or volume");
  const std::int64_t plane = in.nx * in.ny * 4;
  const std::int64_t vol = plane * in.nz;
  std::int64_t B = initial_batch(in);
  for (;; B = (B + 1) / 2) {
    const std::int64_t work = fft_work >= 0 ? fft_work : fft_work_estimate(in, B);
    const std::int64_t fixed = batch_bytes(in, B, work);
    plan p;
    p.views_per_batch = static_cast<int>(B);
    p.batches = static_cast<int>((in.views + B - 1) / B);
    p.budget = budget;
    if (fixed + vol <= budget) {
      p.slab_nz = in.nz;
      p.planned = fixed + vol;
      return p;
    }
    const std::int64_t min_planes = std::min<std::int64_t>(in.nz, 8);
    if (fixed + min_planes * plane <= budget) {
      p.slab_mode = true;
      const std::int64_t store = in.views * in.rows * in.cols * 4;
      // Keep the store on the device if that still leaves a quarter of the volume (at most
      // 32 and at least the minimum planes) per slab.
      const std::int64_t good_planes =
          std::max(min_planes, std::clamp<std::int64_t>(in.nz / 4, 1, 32));
      p.device_store = fixed + store + good_planes * plane <= budget;
      const std::int64_t avail = budget - fixed - (p.device_store ? store : 0);
      p.slab_nz = std::clamp<std::int64_t>(avail / plane, 1, in.nz);
      const std::int64_t n_slabs = (in.nz + p.slab_nz - 1) / p.slab_nz;
      p.slab_nz = (in.nz + n_slabs - 1) / n_slabs;  // balanced slabs
      p.planned = fixed + p.slab_nz * plane + (p.device_store ? store : 0);
      return p;
    }
    if (B == 1)
      throw ctforge::error("CUDA reconstruction: a device memory budget of " + format_mib(budget) +
                           " cannot hold the buffers of one view (" + format_mib(fixed) +
                           ") plus " + std::to_string(min_planes) + " volume planes of " +
                           std::to_string(in.nx) + " x " + std::to_string(in.ny) + " voxels (" +
                           format_mib(min_planes * plane) +
                           "); use a smaller volume or detector, or raise --gpu-memory-limit");
  }
}

/// The plan the pipeline runs: make_plan with the real cuFFT work area, `work_of(B)` (bytes for
/// B views per batch; only called when in.filter, for the batch sizes tried). The largest batch
/// of the halving sequence from the initial one whose buffers, with its own work area, fit
/// next to at least the minimum volume planes; throws as make_plan (or as work_of) when even one
/// view does not. Every size tried may leave its plans in the plan cache (8 shapes).
template <class WorkOf>
plan make_pipeline_plan(plan_input in, std::int64_t budget, WorkOf&& work_of) {
  int B = initial_batch(in);
  if (!in.filter) {
    in.requested_batch = B;
    return make_plan(in, budget, 0);
  }
  for (;; B = (B + 1) / 2) {
    in.requested_batch = B;
    if (B == 1) return make_plan(in, budget, static_cast<std::int64_t>(work_of(B)));
    try {
      const plan p = make_plan(in, budget, static_cast<std::int64_t>(work_of(B)));
      if (p.views_per_batch == B) return p;
    } catch (const ctforge::error&) {
      // B's plans could not be made (cuFFT out of memory) or its work area is too large for
      // any batch: a smaller batch needs less.
    }
  }
}

/// Device-memory plan of the GPU forward projector (src/cuda/forward_project.cu): views per
/// output batch (two batch buffers, so the download of one overlaps the rays of the next) and
/// the slab depth of the 3D texture. With slabs, every slab traces all rays through its
/// planes only, and the host sums the slabs' projections
/// (kernels::joseph_ray_window, detail::forward_project_slabs on the CPU).
struct forward_plan {
  std::int64_t views_per_batch = 1;
  std::int64_t slab_nz = 0;  ///< planes per slab (= nz: the whole volume in one texture)
  int slabs = 1;
  std::int64_t budget = 0;   ///< bytes the plan had to fit in
  std::int64_t planned = 0;  ///< bytes it allocates (estimate)
};

/// Largest output batch the forward projector starts from: 256 MiB of projections, at most
/// 1024 views.
inline std::int64_t forward_initial_batch(std::int64_t views, std::int64_t rows,
                                          std::int64_t cols) {
  const std::int64_t view_bytes = rows * cols * 4;
  return std::clamp<std::int64_t>((256 * k_mib) / view_bytes, 1,
                                  std::min<std::int64_t>(std::max<std::int64_t>(views, 1), 1024));
}

/// Device bytes of the forward projector for `batch` views per output buffer and a 3D texture
/// of `planes` planes: two output buffers, the per-view ray geometry, the array (with the row
/// padding allowance of array_bytes) and a fixed margin.
inline std::int64_t forward_plan_bytes(const volume_geometry& vg, std::int64_t views,
                                       std::int64_t rows, std::int64_t cols, std::int64_t batch,
                                       std::int64_t planes) {
  return 2 * batch * rows * cols * 4 + views * 128 + array_bytes(vg.nx, vg.ny, planes) + 8 * k_mib;
}

/// The forward projector's plan for a budget of `budget` bytes: the whole volume with the
/// largest batch (halving from forward_initial_batch) that fits next to it; otherwise slabs
/// as deep as fit next to a batch of min(initial, 8) views (halved down to one view), balanced.
/// Throws ctforge::error (sizes and the --gpu-memory-limit hint) when one view and one plane do
/// not fit. Slabs are at most `max_planes` deep (the device's 3D texture depth limit).
inline forward_plan make_forward_plan(const volume_geometry& vg, std::int64_t views,
                                      std::int64_t rows, std::int64_t cols, std::int64_t budget,
                                      std::int64_t max_planes = std::int64_t{1} << 40) {
  CTFORGE_EXPECTS(views >= 1 && rows >= 1 && cols >= 1 && vg.nx >= 1 && vg.ny >= 1 && vg.nz >= 1,
                  "CUDA forward projection plan: empty projections or volume");
  forward_plan p;
  p.budget = budget;
  const std::int64_t first = forward_initial_batch(views, rows, cols);
  for (std::int64_t c = first;; c = (c + 1) / 2) {
    const std::int64_t need = forward_plan_bytes(vg, views, rows, cols, c, vg.nz);
    if (vg.nz <= max_planes && need <= budget) {
      p.views_per_batch = c;
      p.slab_nz = vg.nz;
      p.planned = need;
      return p;
    }
    if (c == 1) break;
  }
  for (std::int64_t c = std::min<std::int64_t>(first, 8);; c = (c + 1) / 2) {
    if (forward_plan_bytes(vg, views, rows, cols, c, 1) <= budget) {
      // Deepest slab that fits (array_bytes is monotonic in the plane count).
      std::int64_t lo = 1, hi = std::clamp<std::int64_t>(max_planes, 1, vg.nz);
      while (lo < hi) {
        const std::int64_t mid = (lo + hi + 1) / 2;
        if (forward_plan_bytes(vg, views, rows, cols, c, mid) <= budget)
          lo = mid;
        else
          hi = mid - 1;
      }
      const std::int64_t n_slabs = (vg.nz + lo - 1) / lo;
      p.views_per_batch = c;
      p.slab_nz = (vg.nz + n_slabs - 1) / n_slabs;  // balanced slabs
      p.slabs = static_cast<int>((vg.nz + p.slab_nz - 1) / p.slab_nz);
      p.planned = forward_plan_bytes(vg, views, rows, cols, c, p.slab_nz);
      return p;
    }
    if (c == 1) break;
  }
  throw ctforge::error("CUDA forward projection: a device memory budget of " + format_mib(budget) +
                       " cannot hold one projection of " + std::to_string(rows) + " x " +
                       std::to_string(cols) + " pixels plus one volume plane of " +
                       std::to_string(vg.nx) + " x " + std::to_string(vg.ny) + " voxels (" +
                       format_mib(forward_plan_bytes(vg, views, rows, cols, 1, 1)) +
                       " in all); use a smaller volume or detector, or raise --gpu-memory-limit");
}

/// A slab of the volume and the detector rows its voxels project onto.
struct slab_info {
  std::int64_t z0 = 0, nz = 0;  ///< first plane and plane count
  int row_offset = 0;           ///< first detector row kept
  int rows_valid = 0;           ///< rows kept: [row_offset, row_offset + rows_valid)
};

/// slab_info of planes [z0, z0 + nz) with the detector rows of `band`.
inline slab_info slab_of(std::int64_t z0, std::int64_t nz, const row_band& band) {
  slab_info s;
  s.z0 = z0;
  s.nz = nz;
  s.row_offset = static_cast<int>(band.r0);
  s.rows_valid = static_cast<int>(band.r1 - band.r0);
  return s;
}

/// Detector rows the voxel centres of planes [z0, z0 + nz) project onto under any of the
/// (double) matrices, widened so that both bilinear taps of every projected row lie inside,
/// with one row of margin for float rounding; clamped to [0, rows) (kernels::slab_row_band).
inline slab_info slab_rows(const volume_geometry& vg, const std::vector<projection_matrix>& mats,
                           std::int64_t rows, std::int64_t z0, std::int64_t nz) {
  const slab_box box = slab_centres(vg.origin_mm, vg.spacing_mm, vg.nx, vg.ny, z0, nz);
  return slab_of(z0, nz, slab_row_band(box, mats.data(), mats.size(), rows, /*curved=*/false));
}

/// slab_rows for a cylindrical detector (kernels::cyl_map_d per view); a source within half a
/// voxel of the volume's xy-rectangle takes every row.
inline slab_info slab_rows_curved(const volume_geometry& vg, const std::vector<cyl_map_d>& maps,
                                  std::int64_t rows, std::int64_t z0, std::int64_t nz) {
  const slab_box box = slab_centres(vg.origin_mm, vg.spacing_mm, vg.nx, vg.ny, z0, nz);
  const double half_voxel = 0.5 * std::min(std::abs(vg.spacing_mm[0]), std::abs(vg.spacing_mm[1]));
  return slab_of(z0, nz,
                 slab_row_band(box, maps.data(), maps.size(), rows, /*curved=*/true, half_voxel));
}

/// The cylindrical mappings with rows counted from row_offset (row0 - row_offset, in double),
/// stored in the back-projector's proj_matrix slots (the same 12 floats; see kernels::cyl_map).
inline void shifted_cyl_maps(const std::vector<cyl_map_d>& maps, int row_offset,
                             proj_matrix* out) {
  for (std::size_t v = 0; v < maps.size(); ++v)
    for (int i = 0; i < 12; ++i) {
      double value = maps[v][static_cast<std::size_t>(i)];
      if (i == 8) value -= static_cast<double>(row_offset);
      out[v].m[i] = static_cast<float>(value);
    }
}

/// Float matrices whose detector rows are counted from row_offset (row' = row - row_offset:
/// p1' = p1 - row_offset * p2), shifted in double precision. row_offset = 0 gives
/// kernels::float_matrices.
inline void shifted_matrices(const std::vector<projection_matrix>& mats, int row_offset,
                             proj_matrix* out) {
  for (std::size_t v = 0; v < mats.size(); ++v) {
    const auto& m = mats[v];
    for (int i = 0; i < 12; ++i) {
      double value = m[static_cast<std::size_t>(i)];
      if (i >= 4 && i < 8)
        value -= static_cast<double>(row_offset) * m[static_cast<std::size_t>(i + 4)];
      out[v].m[i] = static_cast<float>(value);
    }
  }
}

/// The slabs of a plan (one slab of the whole volume when not in slab mode). Cylindrical
/// detectors: `maps` (mats then unused), rows from slab_rows_curved.
inline std::vector<slab_info> make_slabs(const plan& p, const volume_geometry& vg,
                                         const std::vector<projection_matrix>& mats,
                                         std::int64_t rows,
                                         const std::vector<cyl_map_d>* maps = nullptr) {
  std::vector<slab_info> out;
  for (std::int64_t z0 = 0; z0 < vg.nz; z0 += p.slab_nz) {
    const std::int64_t nz = std::min(p.slab_nz, vg.nz - z0);
    if (p.slab_mode && maps)
      out.push_back(slab_rows_curved(vg, *maps, rows, z0, nz));
    else if (p.slab_mode)
      out.push_back(slab_rows(vg, mats, rows, z0, nz));
    else
      out.push_back({z0, nz, 0, static_cast<int>(rows)});
  }
  return out;
}

}  // namespace ctforge::kernels::cuda
