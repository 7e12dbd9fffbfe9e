// Resumable reconstruction: a long run split into work units recorded in a checkpoint
// directory, so that a crash, SIGKILL or reclaimed (spot) instance loses at most the unit in
// progress and the same call finishes the rest (ctforge recon --checkpoint-dir,
// ctforge.reconstruct(checkpoint_dir=...)). See src/recon/checkpoint.cpp for the files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

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
  int every_iterations = 0;          ///< SIRT: save the iterate every N iterations (0: by time)
  double every_seconds = 30;         ///< SIRT: ... and after T seconds since the last save (0: off)
  /// Called after each unit (FDK / FBP: units complete; SIRT: iterations saved). May be empty.
  std::function<void(std::int64_t)> after_unit;
};

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
