// ctforge::projector_pair: the CPU side runs the CPU projectors straight into the caller's memory
// (the matched back-projector's per-thread volumes kept between calls); the CUDA side keeps a
// CUDA iterative space (src/cuda/iterative_space.cu) sized for one volume and one projection
// stack, so that every device resource is made once.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/projector.hpp"
#include "cuda/cuda_api.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/iterative_space.hpp"

namespace ctforge {

struct projector_pair::impl {
  geometry g;
  volume_geometry vg;
  projector_options opt;
  backprojector adjoint = backprojector::matched;
  backend where = backend::cpu;
  projector_pair_stats st;
  // CUDA: the space and its two buffers (empty on the CPU).
  std::unique_ptr<detail::iterative_space> space;
  detail::space_buffer vol, proj;
  // CPU: the matched back-projector's per-thread volumes, kept between calls.
  detail::matched_scratch scratch;

  std::int64_t volume_size() const { return vg.voxel_count(); }
  std::int64_t projection_size() const { return g.view_count() * g.rows * g.cols; }
};

namespace {

void check_span(const char* call, const char* what, std::size_t got, std::int64_t expected,
                const std::string& shape) {
  CTFORGE_EXPECTS(static_cast<std::int64_t>(got) == expected,
                  fmt::format("projector_pair.{}: {} values for {}; expected {} ({})", call, got,
                              what, expected, shape));
}

std::string volume_shape(const volume_geometry& vg) {
  return fmt::format("nz {} x ny {} x nx {}", vg.nz, vg.ny, vg.nx);
}

std::string projection_shape(const geometry& g) {
  return fmt::format("{} views x {} rows x {} cols", g.view_count(), g.rows, g.cols);
}

}  // namespace

projector_pair::projector_pair(const geometry& g, const volume_geometry& vg,
                               const projector_options& opt, backprojector adjoint)
    : impl_(std::make_unique<impl>()) {
  g.validate();
  vg.validate();
  detail::require_thread_count(opt.threads);
  if (adjoint == backprojector::automatic) adjoint = backprojector::matched;
  CTFORGE_EXPECTS(adjoint == backprojector::matched || adjoint == backprojector::voxel,
                  "projector_pair: unknown back-projector");
  impl_->g = g;
  impl_->vg = vg;
  impl_->opt = opt;
  impl_->adjoint = adjoint;
  impl_->where = resolve_backend(opt.where, nullptr, opt.device);
#if defined(CTFORGE_WITH_CUDA)
  if (impl_->where == backend::cuda) {
    detail::space_config cfg;
    static_cast<execution_context&>(cfg) = opt;
    cfg.where = backend::cuda;
    // A matched pair samples exactly (the texture unit's 8-bit weights are not its scatter's).
    cfg.gpu_hardware_interpolation =
        opt.gpu_hardware_interpolation && adjoint == backprojector::voxel;
    cfg.subset_count = 1;
    impl_->space = detail::cuda_make_space(g, vg, cfg, 1, 1);
    impl_->vol = impl_->space->volume();
    impl_->proj = impl_->space->projections(-1);
  }
#else
  impl_->where = backend::cpu;
#endif
}

projector_pair::~projector_pair() = default;
projector_pair::projector_pair(projector_pair&&) noexcept = default;
projector_pair& projector_pair::operator=(projector_pair&&) noexcept = default;

void projector_pair::apply(std::span<const float> volume, std::span<float> projections) {
  impl& m = *impl_;
  check_span("apply", "the volume", volume.size(), m.volume_size(), volume_shape(m.vg));
  check_span("apply", "the projections", projections.size(), m.projection_size(),
             projection_shape(m.g));
  if (m.space) {
    // The CPU forward_project's check, before anything is uploaded.
    const std::string bad = detail::first_non_finite_voxel(volume.data(), m.vg, m.opt.threads);
    if (!bad.empty())
      throw usage_error(fmt::format(
          "projector_pair.apply: the volume holds a non-finite value {}; projections need "
          "finite values",
          bad));
    m.space->upload(volume, m.vol);
    m.space->forward(m.vol, m.proj, -1);
    m.space->download(m.proj, projections);
  } else {
    detail::forward_project_into(volume_view(m.vg, volume), m.g, m.opt.threads, projections);
  }
  ++m.st.apply_calls;
}

void projector_pair::apply_adjoint(std::span<const float> projections, std::span<float> volume) {
  impl& m = *impl_;
  check_span("apply_adjoint", "the projections", projections.size(), m.projection_size(),
             projection_shape(m.g));
  check_span("apply_adjoint", "the volume", volume.size(), m.volume_size(), volume_shape(m.vg));
  const projection_view pv(m.g.view_count(), m.g.rows, m.g.cols, projections);
  if (m.space) {
    detail::check_finite_values(pv, m.opt.threads);
    m.space->upload(projections, m.proj);
    m.space->back(m.proj, m.vol, -1,
                  m.adjoint == backprojector::matched ? detail::backprojector_kind::matched
                                                      : detail::backprojector_kind::voxel);
    m.space->download(m.vol, volume);
  } else {
    if (m.adjoint == backprojector::matched)
      detail::back_project_matched_into(pv, m.g, m.vg, m.opt.threads, volume, m.scratch);
    else
      detail::back_project_into(pv, m.g, m.vg, m.opt.threads, volume);
  }
  ++m.st.adjoint_calls;
}

std::int64_t projector_pair::volume_size() const {
  return impl_->volume_size();
}
std::int64_t projector_pair::projection_size() const {
  return impl_->projection_size();
}
const geometry& projector_pair::geom() const {
  return impl_->g;
}
const volume_geometry& projector_pair::grid() const {
  return impl_->vg;
}
backend projector_pair::where() const {
  return impl_->where;
}
backprojector projector_pair::adjoint() const {
  return impl_->adjoint;
}

projector_pair_stats projector_pair::stats() const {
  projector_pair_stats s = impl_->st;
  if (impl_->space) {
    const detail::space_stats d = impl_->space->stats();
    s.allocations = impl_->space->resource_allocations();
    s.bytes_uploaded = d.bytes_uploaded;
    s.bytes_downloaded = d.bytes_downloaded;
  }
  return s;
}

}  // namespace ctforge
