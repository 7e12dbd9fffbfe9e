// What the iterative methods share: option validation, the space they run in, the projections
// uploaded into it, progress / cancellation, the per-iteration report and the stopping rule.
#include "recon/iterative/iterative.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/enum_names.hpp"
#include "core/finite_scan.hpp"
#include "ctforge/error.hpp"

namespace ctforge::detail {

constexpr enum_name<algorithm> k_display_names[] = {{algorithm::sirt, "SIRT"},
                                                    {algorithm::os_sart, "OS-SART"},
                                                    {algorithm::cgls, "CGLS"},
                                                    {algorithm::fista_tv, "FISTA-TV"},
                                                    {algorithm::osem, "OSEM"}};

const char* display_name(algorithm a) {
  return name_of(a, k_display_names, "reconstruction");
}

backprojector_kind backprojector_for(const recon_options& opt) {
  switch (opt.backprojector) {
    case backprojector::voxel:
      return backprojector_kind::voxel;
    case backprojector::matched:
      return backprojector_kind::matched;
    case backprojector::automatic:
      break;
  }
  return opt.algo == algorithm::sirt || opt.algo == algorithm::os_sart
             ? backprojector_kind::voxel
             : backprojector_kind::matched;
}

void validate_iterative(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt) {
  require_host(proj, display_name(opt.algo));
  validate_iterative_options(g, vg, opt);
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("projections are {} views x {} rows x {} cols but the geometry has "
                              "{} x {} x {}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  "projection data size does not match its dimensions");
}

void validate_iterative_options(const geometry& g, const volume_geometry& vg,
                                const recon_options& opt) {
  const char* name = display_name(opt.algo);
  g.validate();
  vg.validate();
  CTFORGE_EXPECTS(opt.iterations >= 1 && opt.iterations <= 1000000,
                  fmt::format("--iterations: must be in [1, 1000000] (got {})", opt.iterations));
  CTFORGE_EXPECTS(std::isfinite(opt.relaxation) && opt.relaxation > 0 && opt.relaxation < 2,
                  fmt::format("--relaxation: must be in (0, 2) (got {})", opt.relaxation));
  CTFORGE_EXPECTS(opt.subsets >= 1, fmt::format("--subsets: must be >= 1 (got {})", opt.subsets));
  CTFORGE_EXPECTS(std::isfinite(opt.tolerance) && opt.tolerance >= 0 && opt.tolerance < 1,
                  fmt::format("--tolerance: must be in [0, 1) (got {})", opt.tolerance));
  if (opt.algo == algorithm::fista_tv) {
    CTFORGE_EXPECTS(opt.tv_weight != 0,
                    "--tv-weight: FISTA-TV needs it: a weight > 0 in units of the volume's "
                    "values, typically 1e-4 to 1e-3 of the object's peak value");
    CTFORGE_EXPECTS(std::isfinite(opt.tv_weight) && opt.tv_weight > 0,
                    fmt::format("--tv-weight: FISTA-TV needs a weight > 0 in units of the "
                                "volume's values, typically 1e-4 to 1e-3 of the object's peak "
                                "value (got {})",
                                opt.tv_weight));
    CTFORGE_EXPECTS(
        opt.tv_iterations >= 1 && opt.tv_iterations <= 10000,
        fmt::format("--tv-iterations: must be in [1, 10000] (got {})", opt.tv_iterations));
  }
  if (opt.backprojector == backprojector::voxel &&
      (opt.algo == algorithm::cgls || opt.algo == algorithm::fista_tv))
    throw usage_error(fmt::format(
        "--backprojector voxel: {} needs the exact transpose of the forward projector; use "
        "matched (the default)",
        name));
  if (opt.algo == algorithm::cgls)
    CTFORGE_EXPECTS(!opt.nonnegative,
                    "--nonnegative: CGLS has no constraint step; use --algorithm sirt, os-sart, "
                    "fista-tv or osem");
  if (!opt.initial.empty()) {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(opt.initial.size()) == vg.voxel_count(),
                    fmt::format("--initial: holds {} values but the grid has {} x {} x {} = {} "
                                "voxels",
                                opt.initial.size(), vg.nx, vg.ny, vg.nz, vg.voxel_count()));
    const std::string bad = first_non_finite_voxel(opt.initial.data(), vg, opt.threads);
    CTFORGE_EXPECTS(bad.empty(), fmt::format("--initial: non-finite value {}", bad));
    CTFORGE_EXPECTS(opt.checkpoint.resume.iterations == 0,
                    fmt::format("--initial: a resumed {} run starts from its saved state", name));
  }
  const iterative_state& resume = opt.checkpoint.resume;
  CTFORGE_EXPECTS(resume.iterations >= 0 && resume.iterations <= opt.iterations,
                  fmt::format("{}: the saved state holds {} iterations, more than the {} asked for",
                              name, resume.iterations, opt.iterations));
}

iterative_run::iterative_run(const projection_view& proj, const geometry& g,
                             const volume_geometry& vg, const recon_options& opt, backend where,
                             const char* name)
    : proj_(proj), vg_(vg), opt_(opt), name_(name), kind_(backprojector_for(opt)) {
  start_ = std::chrono::steady_clock::now();
  last_save_ = start_;
  space_ = make_space(g, vg, space_config_for(opt, where));
  double s = 0;
  for (const float v : proj.data) s += static_cast<double>(v) * v;
  p_norm2_ = s;
}

iterative_run::iterative_run(std::unique_ptr<iterative_space> space, projection_loader load,
                             double data_norm2, const volume_geometry& vg,
                             const recon_options& opt, const char* name)
    : vg_(vg),
      opt_(opt),
      name_(name),
      kind_(backprojector_for(opt)),
      space_(std::move(space)),
      load_(std::move(load)),
      p_norm2_(data_norm2) {
  start_ = std::chrono::steady_clock::now();
  last_save_ = start_;
}

space_config space_config_for(const recon_options& opt, backend where) {
  space_config cfg;
  static_cast<execution_context&>(cfg) = opt;
  cfg.where = where;
  // The texture unit's 8-bit weights would make the forward projection differ from the matched
  // scatter's exact ones: a matched pair always samples exactly.
  cfg.gpu_hardware_interpolation =
      opt.gpu_hardware_interpolation && backprojector_for(opt) == backprojector_kind::voxel;
  cfg.subset_count =
      opt.algo == algorithm::os_sart || opt.algo == algorithm::osem ? opt.subsets : 1;
  return cfg;
}

space_buffer iterative_run::upload_projections(int subset) {
  space_buffer b = space_->projections(subset);
  if (load_) {  // (OSEM: negative values count as 0, as below)
    load_(b, subset, opt_.algo == algorithm::osem);
    return b;
  }
  const std::int64_t pixels = proj_.rows * proj_.cols;
  // OSEM models non-negative data: negative values (noise in air, rounding) count as 0.
  const bool clamp = opt_.algo == algorithm::osem;
  if (subset < 0 && !clamp) {
    space_->upload(proj_.data, b);
    return b;
  }
  const auto& views = space_->views_of(subset);
  std::vector<float> host(static_cast<std::size_t>(b.size()));
  for (std::size_t k = 0; k < views.size(); ++k)
    std::memcpy(host.data() + static_cast<std::int64_t>(k) * pixels, proj_.view(views[k]),
                static_cast<std::size_t>(pixels) * sizeof(float));
  if (clamp)
    for (float& v : host) v = std::max(v, 0.0f);
  space_->upload(host, b);
  return b;
}

space_buffer iterative_run::initial_volume(float fill, bool* from_initial, bool track_update) {
  space_buffer x = space_->volume();
  if (!opt_.initial.empty()) {
    space_->upload(opt_.initial, x);
    // OSEM's multiplicative update keeps a start's sign: negative voxels (an FDK start's
    // streaks) start at 0 (and, as zeros do under OSEM, stay there).
    if (opt_.algo == algorithm::osem) space_->clamp_nonnegative(x);
  } else if (fill != 0.0f) {
    space_->fill(x, fill);
  }
  if (from_initial) *from_initial = !opt_.initial.empty();
  if (track_update && wants_update()) x_before_ = space_->volume();
  return x;
}

void iterative_run::before_update(const space_buffer& x) {
  if (!x_before_.empty()) space_->copy(x, x_before_);
}

double iterative_run::relative_update(const space_buffer& x) {
  if (x_before_.empty()) return 0;
  space_->lincomb(1.0f, x, -1.0f, x_before_, x_before_);
  return relative_norm(space_->dot(x_before_, x_before_), space_->dot(x, x));
}

void iterative_run::progress(double fraction) {
  if (opt_.progress) opt_.progress(std::clamp(fraction, 0.0, 1.0));
  opt_.cancel.throw_if_requested(name_);
}

bool iterative_run::end_iteration(int done, double residual, double objective, double rel_update,
                                  double criterion,
                                  std::initializer_list<const space_buffer*> state,
                                  std::initializer_list<double> scalars) {
  if (opt_.on_iteration) {
    iteration_info info;
    info.iteration = done;
    info.residual = residual;
    info.objective = objective;
    info.relative_update = rel_update;
    info.stop_criterion = criterion;
    info.seconds = seconds_offset_ +
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    log_.push_back(info);
    opt_.on_iteration(info);
  }
  // (OSEM's objective is +inf, honestly, when a ray with data sees no activity.)
  CTFORGE_CHECK(std::isfinite(criterion) && std::isfinite(residual) && !std::isnan(objective),
                fmt::format("{}: the iteration became non-finite at iteration {} (inconsistent "
                            "input?)",
                            name_, done));
  save_if_due(done, state, scalars);
  const bool stop = opt_.tolerance > 0 && criterion < opt_.tolerance;
  progress(stop ? 1.0 : static_cast<double>(done) / static_cast<double>(opt_.iterations));
  return stop;
}

const std::vector<double>* iterative_run::resume_into(std::initializer_list<space_buffer*> arrays,
                                                      std::size_t scalar_count) {
  const iterative_state& st = opt_.checkpoint.resume;
  if (st.iterations == 0) return nullptr;
  CTFORGE_EXPECTS(
      st.array_count() == arrays.size() && st.scalars.size() == scalar_count,
      fmt::format("{}: the saved state holds {} arrays and {} scalars, the method "
                  "keeps {} and {}",
                  name_, st.array_count(), st.scalars.size(), arrays.size(), scalar_count));
  std::size_t k = 0;
  for (space_buffer* b : arrays) {
    const std::size_t n = st.array_size(k);
    CTFORGE_EXPECTS(static_cast<std::int64_t>(n) == b->size(),
                    fmt::format("{}: saved array {} holds {} values, the method's holds {} "
                                "(another grid or geometry?)",
                                name_, k, n, b->size()));
    if (st.read) {  // one array at a time in memory here
      std::vector<float> a(n);
      st.read(k, a);
      space_->upload(a, *b);
    } else {
      space_->upload(st.arrays[k], *b);
    }
    ++k;
  }
  // The saved figures (a whole log only): reported again, so that the caller's log is the whole
  // run's; this call's seconds continue from them.
  // (A run without on_iteration computes no figures: its saved states then have no log.)
  if (opt_.on_iteration && static_cast<int>(st.log.size()) == st.iterations) {
    log_ = st.log;
    seconds_offset_ = log_.back().seconds;
    for (const iteration_info& i : log_) opt_.on_iteration(i);
  }
  return &st.scalars;
}

void iterative_run::save_if_due(int done, std::initializer_list<const space_buffer*> arrays,
                                std::initializer_list<double> scalars) {
  const iterative_checkpoint& ck = opt_.checkpoint;
  if (!ck.save || done >= opt_.iterations) return;  // the last iterate is the result itself
  const auto now = std::chrono::steady_clock::now();
  const bool due =
      (ck.every > 0 && done % ck.every == 0) ||
      (ck.seconds > 0 && std::chrono::duration<double>(now - last_save_).count() >= ck.seconds) ||
      opt_.cancel.requested();
  if (!due) return;
  iterative_state st;
  st.iterations = done;
  const std::vector<const space_buffer*> buffers(arrays);
  if (space_->stream_state()) {  // read by the saver array by array, none kept here
    for (const space_buffer* b : buffers) st.sizes.push_back(static_cast<std::size_t>(b->size()));
    st.read = [this, &buffers](std::size_t k, std::span<float> out) {
      space_->download(*buffers.at(k), out);
    };
  } else {
    saved_.resize(buffers.size());
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      saved_[k].resize(static_cast<std::size_t>(buffers[k]->size()));
      space_->download(*buffers[k], saved_[k]);
      st.arrays.emplace_back(saved_[k]);
    }
  }
  st.scalars.assign(scalars.begin(), scalars.end());
  if (static_cast<int>(log_.size()) == done) st.log = log_;
  ck.save(st);
  last_save_ = std::chrono::steady_clock::now();
}

volume iterative_run::result(const space_buffer& x) {
  saved_ = {};  // (host copies of a saved state: no longer needed)
  if (space_->keep_result(x)) {  // written where it goes by the parts (which check its values)
    volume none;
    none.geom = vg_;
    return none;
  }
  volume out(vg_);
  space_->download(x, out.data);
  const std::int64_t bad = first_non_finite(out.data.data(), vg_.voxel_count(), opt_.threads);
  CTFORGE_CHECK(bad < 0,
                fmt::format("{}: the iterate became non-finite (inconsistent input?)", name_));
  return out;
}

volume iterative_reconstruct(const projection_view& proj, const geometry& g,
                             const volume_geometry& vg, const recon_options& opt, backend where) {
  iterative_run run(proj, g, vg, opt, where, display_name(opt.algo));
  return run_method(run);
}

volume run_method(iterative_run& run) {
  const recon_options& opt = run.options();
  switch (opt.algo) {
    case algorithm::sirt:
      return run_sirt(run);
    case algorithm::os_sart:
      return run_os_sart(run);
    case algorithm::cgls:
      return run_cgls(run);
    case algorithm::fista_tv:
      return run_fista_tv(run);
    case algorithm::osem:
      return run_osem(run);
    default:
      break;
  }
  throw usage_error(fmt::format("--algorithm {}: not an iterative method", to_string(opt.algo)));
}

}  // namespace ctforge::detail

namespace ctforge {

void iterative_state::read_array(std::size_t k, std::span<float> out) const {
  CTFORGE_EXPECTS(out.size() == array_size(k),
                  fmt::format("saved array {}: holds {} values, not {}", k, array_size(k),
                              out.size()));
  if (read)
    read(k, out);
  else
    std::copy(arrays[k].begin(), arrays[k].end(), out.begin());
}

}  // namespace ctforge
