// Resumable reconstruction: a long run split into work units recorded in a checkpoint
// directory, so that a crash, SIGKILL or reclaimed (spot) instance loses at most the unit in
// progress and the same call finishes the rest (ctforge recon --checkpoint-dir,
// ctforge.reconstruct(checkpoint_dir=...)). See src/recon/checkpoint.cpp for the files.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/preprocess.hpp"
#include "ctforge/recon.hpp"

namespace ctforge {

/// Thrown by a cancelled reconstruct_resumable; `recorded` says what the directory holds
/// ("5 of 24 units complete in ck/", "the iterate after 30 of 200 iterations is kept in ck/").
class checkpoint_stopped : public cancelled {
 public:
  explicit checkpoint_stopped(const std::string& recorded_work)
      : cancelled("reconstruction cancelled: " + recorded_work +
                  "; the same call again finishes it"),
        recorded(recorded_work) {}
  std::string recorded;
};

struct checkpoint_options {
  std::string dir;                   ///< the checkpoint directory (created when missing)
  std::int64_t planes_per_unit = 0;  ///< FDK / FBP: z-planes per unit; 0: about 16 M voxels
  int every_iterations = 0;   ///< iterative methods: save the state every N iterations (0: by time)
  double every_seconds = 30;  ///< SIRT: ... and after T seconds since the last save (0: off)
  /// Called after each unit (FDK / FBP: units complete; SIRT: iterations saved). May be empty.
  std::function<void(std::int64_t)> after_unit;
};

/// One FDK / FBP work unit: z-planes [k0, k1) of the grid, reconstructed from detector rows
/// [r0, r1) of views [v0, v1) (the rows those planes project onto, plus the interpolation
/// margin; every view, except for helical scans: the views whose rays reach the planes).
struct slab_unit {
  std::int64_t k0 = 0, k1 = 0;  ///< planes of the grid (z indices)
  std::int64_t r0 = 0, r1 = 0;  ///< detector rows (0-based) of the geometry the unit is cut from
  std::int64_t v0 = 0, v1 = 0;  ///< views (0-based) of that geometry
  std::string name() const;     ///< "slab_<k0>_<k1>", the stem of its files in a checkpoint dir
};

/// Planes per unit when none are asked for: about 16 M voxels (64 MB), at least one plane.
std::int64_t default_unit_planes(const volume_geometry& vg);

/// The units of an FDK / FBP run on grid `vg` with `planes` z-planes each (0: the default),
/// in z order, each with its detector-row band in `g`.
std::vector<slab_unit> plan_slab_units(const geometry& g, const volume_geometry& vg,
                                       std::int64_t planes);

/// Planes [u.k0, u.k1) of reconstruct(proj, g, vg, opt) computed from rows [u.r0, u.r1) of views
/// [u.v0, u.v1) of the projections only: `band` holds those ([v1 - v0][r1 - r0][cols]). The ramp
/// filter runs once on the band. Deterministic: the same inputs give the same floats.
volume reconstruct_unit(const projection_view& band, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const slab_unit& u);

/// An FDK / FBP run recorded unit by unit in a checkpoint directory. Several processes (the
/// workers of a cluster on one shared file system) may open the same run at once and record
/// different units; every file is written atomically (temporary name, fsync, rename), the
/// marker after the data, so a reader sees a unit complete or not at all.
class slab_run {
 public:
  /// Opens (creating) `co.dir` for the run described by `run_record_json` (a JSON object: the
  /// inputs and options; the version and the units are added). A directory holding another
  /// run's record is refused (usage_error naming the keys that differ).
  slab_run(const geometry& g, const volume_geometry& vg, const checkpoint_options& co,
           std::string_view run_record_json);

  const std::vector<slab_unit>& units() const noexcept { return units_; }
  const std::string& dir() const noexcept { return dir_; }
  /// Hash of the run record, stamped into every marker.
  const std::string& fingerprint() const noexcept { return hash_; }

  /// Whether unit i is recorded and checks out (marker of this run, size, checksum);
  /// otherwise false with the reason in `why` ("no marker" when it was never recorded).
  bool is_recorded(std::size_t i, std::string* why = nullptr) const;
  /// The recorded planes of unit i ([k1 - k0][ny][nx]); throws error naming the files when
  /// the unit is missing or corrupt.
  std::vector<float> read_unit(std::size_t i) const;
  /// Reconstructs unit i from its band (reconstruct_unit) and records it. A cancelled
  /// opt.cancel throws ctforge::cancelled and records nothing.
  void compute_unit(std::size_t i, const projection_view& band, const recon_options& opt) const;

 private:
  geometry g_;
  volume_geometry vg_;
  std::string dir_, hash_;
  std::vector<slab_unit> units_;
};

/// Source of detector-row bands: rows [r0, r1) of every view ([views][r1 - r0][cols]), e.g. read
/// from a file with io::row_band_options, so that only one unit's rows are in memory.
using row_band_source = std::function<projection_stack(std::int64_t r0, std::int64_t r1)>;

/// Source of a unit's band: rows [u.r0, u.r1) of views [u.v0, u.v1) ([v1 - v0][r1 - r0][cols]).
using band_source = std::function<projection_stack(const slab_unit& u)>;

/// The band source that reads rows [u.r0, u.r1) of every view from `rows` and keeps views
/// [u.v0, u.v1) (all of them but for helical scans, whose units read fewer views: pass a
/// band_source that reads only those to bound the memory).
band_source bands_from_rows(row_band_source rows);

/// `rows` with the preprocessing steps of `opt` applied: each band is read with the rows on
/// either side that the steps need (preprocess_row_margin, clipped to the `total_rows` of the
/// detector), cleaned and cut back to its own rows, so that it equals the same rows of the whole
/// cleaned projections bit for bit. `rows` itself when no step is on.
row_band_source preprocessed_rows(row_band_source rows, std::int64_t total_rows,
                                  preprocess_options opt);

/// Receives each unit's planes in z order: `planes` holds [u.k1 - u.k0][ny][nx] floats.
using slab_sink = std::function<void(const slab_unit& u, std::span<const float> planes)>;

/// FDK / FBP slab by slab with bounded memory: the units of `plan_slab_units(g, vg, planes)`
/// are computed from the bands `rows` gives and handed to `sink` in z order (an HDF5 volume
/// written as it comes: io::volume_file_writer), so that one band and one slab are in memory
/// at a time. With co.dir set the units are also recorded there, and recorded ones are read
/// back instead of computed (resume); `run_record_json` is then the run record as for
/// reconstruct_resumable. opt.cancel stops at the next batch: checkpoint_stopped (co.dir set)
/// or cancelled.
void reconstruct_slabwise(const band_source& bands, const geometry& g, const volume_geometry& vg,
                          recon_options opt, std::int64_t planes, const checkpoint_options& co,
                          std::string_view run_record_json, const slab_sink& sink,
                          const std::function<void(const std::string&)>& note = {});

/// Share `index` of `count` of a run's units: unit i is the share's when i % count == index
/// (`ctforge recon --unit-share K/N`). The shares of one run may be computed one after the
/// other, at the same time by processes on machines that share co.dir, or again after a crash.
struct unit_share {
  std::int64_t index = 0;
  std::int64_t count = 1;
};

/// What a share leaves: how many of the run's `total` units co.dir records once it is done (by
/// any process; counted by their markers), and how many this call computed.
struct share_status {
  std::int64_t recorded = 0, total = 0, computed = 0;
  bool complete() const noexcept { return recorded == total; }
};

/// The units of `share` that co.dir does not record yet (or whose data does not check out),
/// computed from `bands` and recorded there; none is handed on. Once every unit of the run is
/// recorded, reconstruct_slabwise with the same arguments assembles the volume (it then only
/// reads the units back). Arguments as for reconstruct_slabwise, co.dir required. opt.cancel
/// stops at the next batch: checkpoint_stopped says what the share has recorded.
share_status compute_unit_share(const band_source& bands, const geometry& g,
                                const volume_geometry& vg, recon_options opt, std::int64_t planes,
                                const checkpoint_options& co, std::string_view run_record_json,
                                unit_share share,
                                const std::function<void(const std::string&)>& note = {});

/// reconstruct(proj, g, vg, opt), recorded unit by unit in co.dir:
///  * FDK / FBP: slabs of whole z-planes, each from the detector rows it projects onto (the ramp
///    filter runs once per row band), written atomically as slab_<k0>_<k1>.f32 plus a marker
///    slab_<k0>_<k1>.json (range, run fingerprint, version, FNV-1a checksum of the data);
///  * SIRT: the iterate (its whole state) saved into two alternating slots sirt_0 / sirt_1 per
///    opt.sirt_state-like cadence (co.every_iterations / co.every_seconds, and on cancel).
/// `run_record_json` (a JSON object) describes the inputs and options; co.dir keeps it as
/// run.json and refuses units of a different record (usage_error naming the differing keys).
/// Complete, checksum-valid units are reused, so the result is bit-identical to an
/// uninterrupted call. opt.cancel stops at the next batch / iteration: checkpoint_stopped says
/// what is recorded. `note` receives one-line notes (resuming, a corrupted unit recomputed).
volume reconstruct_resumable(const projection_view& proj, const geometry& g,
                             const volume_geometry& vg, recon_options opt,
                             const checkpoint_options& co, std::string_view run_record_json,
                             const std::function<void(const std::string&)>& note = {});

/// Removes the unit files and run record from co.dir (once the result is safely written).
void remove_checkpoint(const checkpoint_options& co);

}  // namespace ctforge
