// ctforge recon --checkpoint-dir (apps/checkpoint.cpp): resumable slab-by-slab FDK / FBP.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "ctforge/recon.hpp"

namespace ctforge::cli {

struct checkpoint_options {
  std::string dir;                  ///< --checkpoint-dir
  std::int64_t planes_per_unit = 0;  ///< --unit-planes; 0: about 16 M voxels per unit
  int every_iterations = 0;          ///< SIRT: --checkpoint-every N iterations (0: by time only)
  double every_seconds = 30;         ///< SIRT: --checkpoint-seconds T (0: by count only)
  /// Called after each unit is recorded with the number complete (tests, progress).
  std::function<void(std::int64_t)> after_unit;
};

/// The run was stopped by SIGINT / SIGTERM with its complete units recorded; exit 128 + signal.
class stopped : public std::runtime_error {
 public:
  stopped(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

/// FDK / FBP of `vg` unit by unit into co.dir (see the file comment of checkpoint.cpp). The
/// run record (inputs and options, as JSON) decides which earlier units may be reused. Throws
/// stopped after SIGINT / SIGTERM, usage_error for a directory of another run.
volume reconstruct_checkpointed(const projection_stack& proj, const geometry& g,
                                const volume_geometry& vg, recon_options ro,
                                const checkpoint_options& co, const nlohmann::json& run_record,
                                const std::function<void(const std::string&)>& note);

/// Removes the unit files and run record of co.dir (after the output is written).
void remove_checkpoint_units(const checkpoint_options& co);

/// "key (a there, b here); ..." for the keys whose values differ.
std::string describe_difference(const nlohmann::json& there, const nlohmann::json& here);

}  // namespace ctforge::cli
