// The iterative methods (SIRT, OS-SART, CGLS, FISTA-TV, OSEM), written once against
// detail::iterative_space (src/recon/iterative_space.hpp) so that they run on every backend;
// reached through ctforge::reconstruct (src/recon/reconstruct.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "recon/iterative_space.hpp"

namespace ctforge::detail {

/// Validates the options of an iterative method (iterations, relaxation, subsets, TV weight,
/// tolerance, back-projector, warm start) and the projections against the geometry; throws
/// usage_error naming the option or mismatch.
void validate_iterative(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt);
/// validate_iterative's checks of the options, geometry and grid only (the projections are
/// elsewhere: a partitioned run's parts hold them).
void validate_iterative_options(const geometry& g, const volume_geometry& vg,
                                const recon_options& opt);

/// The space an iterative method runs in on backend `where`: its execution context, subsets and
/// interpolation.
space_config space_config_for(const recon_options& opt, backend where);

/// The method's name in messages: SIRT, OS-SART, CGLS, FISTA-TV, OSEM.
const char* display_name(algorithm a);

/// The back-projector opt.algo runs with (automatic resolved).
backprojector_kind backprojector_for(const recon_options& opt);

/// Runs opt.algo (iterative) of `vg` from `proj` on backend `where` (cpu or cuda, already
/// resolved), after validate_iterative. Reports progress once per iteration.
volume iterative_reconstruct(const projection_view& proj, const geometry& g,
                             const volume_geometry& vg, const recon_options& opt, backend where);

/// Fills a projection buffer of subset s with the measured data (negative values as 0 when
/// asked): how a space whose projections are not on the host loads them.
using projection_loader = std::function<void(space_buffer& dst, int subset, bool clamp_negative)>;

/// What every method shares while it runs: the space, the projections in it, the progress /
/// cancellation / per-iteration report, and the relative update.
class iterative_run {
 public:
  iterative_run(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                const recon_options& opt, backend where, const char* name);
  /// A run in `space`, whose projections `load` fills and whose |p|^2 is `data_norm2` (a
  /// partitioned space: the parts hold the projections).
  iterative_run(std::unique_ptr<iterative_space> space, projection_loader load, double data_norm2,
                const volume_geometry& vg, const recon_options& opt, const char* name);

  iterative_space& space() { return *space_; }
  const recon_options& options() const { return opt_; }
  const char* name() const { return name_; }
  const projection_view& host_projections() const { return proj_; }
  backprojector_kind kind() const { return kind_; }

  /// The projections of subset s (-1: all views) uploaded into a new buffer.
  space_buffer upload_projections(int subset);
  /// |p|^2 of the whole data (double).
  double data_norm2() const { return p_norm2_; }
  /// A volume buffer holding opt.initial, or `fill` everywhere when there is none; sets
  /// *from_initial. `track_update`: keep a volume for before_update / relative_update.
  space_buffer initial_volume(float fill, bool* from_initial = nullptr, bool track_update = true);

  /// Whether the per-iteration figures are wanted (opt.on_iteration set).
  bool wants_figures() const { return static_cast<bool>(opt_.on_iteration); }
  /// Whether the relative update is wanted (figures or a tolerance).
  bool wants_update() const { return wants_figures() || opt_.tolerance > 0; }

  /// Before an update of x: keeps a copy of it (when the relative update is wanted).
  void before_update(const space_buffer& x);
  /// After it: |x - x_before| / |x| (0 when not wanted or x = 0).
  double relative_update(const space_buffer& x);

  /// Progress (fraction done) and the cancellation check.
  void progress(double fraction);
  /// After iteration `done` (1-based): reports it to on_iteration, checks its figures are
  /// finite, saves the method's state {state, scalars} when due (save_if_due), then reports
  /// progress (where a requested stop throws, the state saved); says whether to stop (the
  /// criterion fell below the tolerance). `criterion`: the relative update, or what the method
  /// stops on.
  bool end_iteration(int done, double residual, double objective, double rel_update,
                     double criterion, std::initializer_list<const space_buffer*> state,
                     std::initializer_list<double> scalars = {});

  /// The first iteration to run (0-based): the resumed state's iteration count, else 0.
  int first_iteration() const { return opt_.checkpoint.resume.iterations; }
  /// Resuming (opt.checkpoint.resume.iterations > 0): uploads the saved arrays into `arrays`, in
  /// order, and returns the saved scalars; nullptr when not resuming. usage_error naming the
  /// method when the saved state does not have the method's arrays and scalars.
  const std::vector<double>* resume_into(std::initializer_list<space_buffer*> arrays,
                                         std::size_t scalar_count);
  /// The result, downloaded; runtime error naming the method when it holds a non-finite value.
  /// A space that keeps it (iterative_space::keep_result) gives a volume without data.
  volume result(const space_buffer& x);

 private:
  /// After iteration `done` (1-based): saves the state {arrays, scalars} and the log so far
  /// through opt.checkpoint.save when it is due (every N iterations, every T seconds, or a stop
  /// requested), except after the last iteration.
  void save_if_due(int done, std::initializer_list<const space_buffer*> arrays,
                   std::initializer_list<double> scalars);

  projection_view proj_;  ///< a view (by value: callers may pass a temporary made from a stack)
  const volume_geometry vg_;
  const recon_options& opt_;
  const char* name_;
  backprojector_kind kind_;
  std::unique_ptr<iterative_space> space_;
  projection_loader load_;  ///< set: the projections come from the space, not proj_
  space_buffer x_before_;
  std::vector<std::vector<float>> saved_;  ///< host copies of the saved arrays (reused)
  std::chrono::steady_clock::time_point last_save_;
  double p_norm2_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::vector<iteration_info> log_;  ///< what on_iteration received (saved with the state)
  double seconds_offset_ = 0;        ///< a resumed run's seconds before this call
};

/// Runs the method opt.algo names (usage_error when it is not iterative).
volume run_method(iterative_run& run);

/// The methods (one file each under src/recon/iterative/).
volume run_sirt(iterative_run& run);
volume run_os_sart(iterative_run& run);
volume run_cgls(iterative_run& run);
volume run_fista_tv(iterative_run& run);
volume run_osem(iterative_run& run);

/// sqrt(max(a, 0) / b), 0 when b is not positive.
inline double relative_norm(double a2, double b2) {
  return b2 > 0 ? std::sqrt(std::max(a2, 0.0) / b2) : 0.0;
}

}  // namespace ctforge::detail
