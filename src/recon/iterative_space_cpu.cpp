// The CPU iterative space (src/recon/iterative_space.hpp): host arrays, the CPU projectors on
// per-subset geometries made once (writing into the space's buffers, the matched
// back-projector's per-thread volumes kept between calls), element-wise loops with static
// OpenMP schedules, reductions in double over a fixed partition (one partial per thread, summed
// in thread order), and the TV prox looping over math/tv.hpp's per-voxel arithmetic (the
// CUDA kernels run the same).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/projector.hpp"
#include "math/tv.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/iterative_space.hpp"

namespace ctforge::detail {

geometry select_views(const geometry& g, std::span<const std::int64_t> views) {
  geometry out = g;
  out.views.clear();
  out.views.reserve(views.size());
  const auto n = static_cast<std::size_t>(g.view_count());
  for (const std::int64_t v : views) {
    CTFORGE_EXPECTS(v >= 0 && static_cast<std::size_t>(v) < n,
                    fmt::format("view {} out of range (the geometry has {} views)", v, n));
    out.views.push_back(g.views[static_cast<std::size_t>(v)]);
  }
  if (g.orbit) {
    // Per-view arrays follow the views; an empty or single-value array applies to all views.
    const auto pick = [&](const std::vector<double>& a) {
      if (a.size() != n) return a;
      std::vector<double> r;
      r.reserve(views.size());
      for (const std::int64_t v : views) r.push_back(a[static_cast<std::size_t>(v)]);
      return r;
    };
    out.orbit->angles_rad = pick(g.orbit->angles_rad);
    out.orbit->offset_u_mm = pick(g.orbit->offset_u_mm);
    out.orbit->offset_v_mm = pick(g.orbit->offset_v_mm);
  }
  return out;
}

namespace {

void release_host(float* p) noexcept {
  delete[] p;
}

/// Element-wise loops and reductions over fewer elements run on the calling thread (a parallel
/// region costs more than they do); results are the same either way.
constexpr std::int64_t k_parallel_above = 16384;

/// The static partition of [0, n) among `parts` threads: [begin, end) of part t.
struct partition {
  std::int64_t n;
  int parts;
  std::int64_t begin(int t) const { return n * t / parts; }
  std::int64_t end(int t) const { return n * (t + 1) / parts; }
};

class cpu_space final : public iterative_space {
 public:
  cpu_space(const geometry& g, const volume_geometry& vg, const space_config& cfg)
      : g_(g), vg_(vg), threads_(resolve_threads(cfg.threads)) {
    g.validate();
    vg.validate();
    const std::int64_t n_views = g.view_count();
    subsets_ = static_cast<int>(
        std::clamp<std::int64_t>(cfg.subset_count, 1, std::max<std::int64_t>(n_views, 1)));
    all_views_.resize(static_cast<std::size_t>(n_views));
    for (std::int64_t v = 0; v < n_views; ++v) all_views_[static_cast<std::size_t>(v)] = v;
    subset_views_.resize(static_cast<std::size_t>(subsets_));
    for (int s = 0; s < subsets_; ++s) {
      auto& vs = subset_views_[static_cast<std::size_t>(s)];
      for (std::int64_t v = s; v < n_views; v += subsets_) vs.push_back(v);
      subset_geoms_.push_back(subsets_ == 1 ? g : select_views(g, vs));
    }
    partials_.resize(static_cast<std::size_t>(threads_));
  }

  backend where() const override { return backend::cpu; }
  const geometry& geom() const override { return g_; }
  const volume_geometry& grid() const override { return vg_; }
  int subset_count() const override { return subsets_; }
  const std::vector<std::int64_t>& views_of(int subset) const override {
    if (subset < 0) return all_views_;
    check_subset(subset);
    return subset_views_[static_cast<std::size_t>(subset)];
  }

  space_buffer volume() override {
    ++stats_.buffers_allocated;
    return make(vg_.voxel_count());
  }
  space_buffer projections(int subset) override {
    ++stats_.buffers_allocated;
    return make(projection_size(subset));
  }
  void upload(std::span<const float> host, space_buffer& dst) override {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(host.size()) == dst.size(),
                    fmt::format("upload: {} values into a buffer of {}", host.size(), dst.size()));
    copy_n(host.data(), dst.data(), dst.size());
    stats_.bytes_uploaded += dst.size() * static_cast<std::int64_t>(sizeof(float));
  }
  void download(const space_buffer& src, std::span<float> host) override {
    CTFORGE_EXPECTS(
        static_cast<std::int64_t>(host.size()) == src.size(),
        fmt::format("download: a buffer of {} into {} values", src.size(), host.size()));
    copy_n(src.data(), host.data(), src.size());
    stats_.bytes_downloaded += src.size() * static_cast<std::int64_t>(sizeof(float));
  }

  void forward(const space_buffer& x, space_buffer& y, int subset) override {
    check_size(x, vg_.voxel_count(), "forward: the volume");
    check_size(y, projection_size(subset), "forward: the projections");
    forward_project_into(volume_view(vg_, {x.data(), static_cast<std::size_t>(x.size())}),
                         geom_of(subset), threads_,
                         {y.data(), static_cast<std::size_t>(y.size())});
    ++stats_.forward_calls;
  }
  void back(const space_buffer& y, space_buffer& x, int subset, backprojector_kind kind) override {
    check_size(y, projection_size(subset), "back: the projections");
    check_size(x, vg_.voxel_count(), "back: the volume");
    const geometry& gs = geom_of(subset);
    const projection_view pv(gs.view_count(), gs.rows, gs.cols,
                             {y.data(), static_cast<std::size_t>(y.size())});
    const std::span<float> out(x.data(), static_cast<std::size_t>(x.size()));
    if (kind == backprojector_kind::matched)
      back_project_matched_into(pv, gs, vg_, threads_, out, matched_scratch_);
    else
      back_project_into(pv, gs, vg_, threads_, out);
    ++stats_.back_calls;
  }

  void fill(space_buffer& x, float value) override {
    float* d = x.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) d[i] = value;
  }
  void copy(const space_buffer& src, space_buffer& dst) override {
    check_size(dst, src.size(), "copy");
    copy_n(src.data(), dst.data(), src.size());
  }
  void axpby(float a, const space_buffer& x, float b, space_buffer& y) override {
    check_size(y, x.size(), "axpby");
    const float* xd = x.data();
    float* yd = y.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) yd[i] = a * xd[i] + b * yd[i];
  }
  void lincomb(float a, const space_buffer& x, float b, const space_buffer& y,
               space_buffer& out) override {
    check_size(y, x.size(), "lincomb");
    check_size(out, x.size(), "lincomb");
    const float* xd = x.data();
    const float* yd = y.data();
    float* o = out.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) o[i] = a * xd[i] + b * yd[i];
  }
  void invert_above(space_buffer& x, float floor) override {
    float* d = x.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) d[i] = d[i] > floor ? 1.0f / d[i] : 0.0f;
  }
  void weighted_residual(const space_buffer& w, const space_buffer& p, const space_buffer& q,
                         space_buffer& out) override {
    check_size(p, w.size(), "weighted_residual");
    check_size(q, w.size(), "weighted_residual");
    check_size(out, w.size(), "weighted_residual");
    const float* wd = w.data();
    const float* pd = p.data();
    const float* qd = q.data();
    float* o = out.data();
    const std::int64_t n = w.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) o[i] = wd[i] * (pd[i] - qd[i]);
  }
  void weighted_update(space_buffer& x, float lambda, const space_buffer& c, const space_buffer& u,
                       bool nonnegative) override {
    check_size(c, x.size(), "weighted_update");
    check_size(u, x.size(), "weighted_update");
    float* xd = x.data();
    const float* cd = c.data();
    const float* ud = u.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = xd[i] + lambda * cd[i] * ud[i];
      xd[i] = nonnegative ? std::max(v, 0.0f) : v;
    }
  }
  void clamp_nonnegative(space_buffer& x) override {
    float* d = x.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) d[i] = std::max(d[i], 0.0f);
  }
  void ratio(const space_buffer& p, const space_buffer& q, float eps, space_buffer& out) override {
    check_size(q, p.size(), "ratio");
    check_size(out, p.size(), "ratio");
    const float* pd = p.data();
    const float* qd = q.data();
    float* o = out.data();
    const std::int64_t n = p.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) o[i] = qd[i] > eps ? pd[i] / qd[i] : 0.0f;
  }
  void multiply_ratio(space_buffer& x, const space_buffer& u, const space_buffer& s,
                      float eps) override {
    check_size(u, x.size(), "multiply_ratio");
    check_size(s, x.size(), "multiply_ratio");
    float* xd = x.data();
    const float* ud = u.data();
    const float* sd = s.data();
    const std::int64_t n = x.size();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i)
      if (sd[i] > eps) xd[i] = xd[i] * ud[i] / sd[i];
  }

  double dot(const space_buffer& a, const space_buffer& b) override {
    check_size(b, a.size(), "dot");
    const float* ad = a.data();
    const float* bd = b.data();
    return reduce(a.size(), [=](std::int64_t i) {
      return static_cast<double>(ad[i]) * static_cast<double>(bd[i]);
    });
  }
  double total_variation(const space_buffer& x) override {
    check_size(x, vg_.voxel_count(), "total_variation");
    const float* d = x.data();
    const kernels::tv_dims dims{vg_.nx, vg_.ny, vg_.nz};
    return reduce(x.size(), [=](std::int64_t i) { return kernels::tv_norm_at(d, dims, i); });
  }
  double poisson_log_likelihood(const space_buffer& p, const space_buffer& q) override {
    check_size(q, p.size(), "poisson_log_likelihood");
    const float* pd = p.data();
    const float* qd = q.data();
    constexpr double neg_inf = -std::numeric_limits<double>::infinity();
    return reduce(p.size(), [=](std::int64_t i) {
      const double pi = pd[i], qi = qd[i];
      if (qi > 0) return (pi != 0 ? pi * std::log(qi) : 0.0) - qi;
      return pi > 0 ? neg_inf : 0.0;
    });
  }

  void tv_prox(space_buffer& x, float weight, int iterations, bool nonnegative) override {
    check_size(x, vg_.voxel_count(), "tv_prox");
    CTFORGE_EXPECTS(std::isfinite(weight) && weight >= 0,
                    fmt::format("tv_prox: the weight must be finite and >= 0 (got {})", weight));
    CTFORGE_EXPECTS(iterations >= 0, "tv_prox: the iteration count must be >= 0");
    if (weight == 0 || iterations == 0) {  // the prox of 0 is the identity
      if (nonnegative) clamp_nonnegative(x);
      return;
    }
    const kernels::tv_dims d{vg_.nx, vg_.ny, vg_.nz};
    const std::int64_t n = d.count();
    const bool three = d.nz > 1;
    // Scratch of the dual fields (two per axis) and the primal iterate: made once per space.
    if (tv_scratch_.empty()) {
      const int fields = three ? 7 : 5;
      tv_scratch_.assign(static_cast<std::size_t>(fields * n), 0.0f);
    } else {
      std::fill(tv_scratch_.begin(), tv_scratch_.end(), 0.0f);
    }
    float* base = tv_scratch_.data();
    float* z = base;
    float* px = base + n;
    float* py = base + 2 * n;
    float* rx = base + 3 * n;
    float* ry = base + 4 * n;
    float* pz = three ? base + 5 * n : nullptr;
    float* rz = three ? base + 6 * n : nullptr;
    const float* b = x.data();
    double t = 1.0;
    for (int k = 0; k < iterations; ++k) {
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
      for (std::int64_t i = 0; i < n; ++i)
        z[i] = kernels::tv_primal_at(b, rx, ry, rz, d, weight, nonnegative, i);
      const double t_next = kernels::tv_next_t(t);
      const auto momentum = static_cast<float>((t - 1.0) / t_next);
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
      for (std::int64_t i = 0; i < n; ++i)
        kernels::tv_dual_at(z, rx, ry, rz, px, py, pz, d, weight, momentum, i);
      t = t_next;
    }
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i)
      z[i] = kernels::tv_primal_at(b, px, py, pz, d, weight, nonnegative, i);
    copy_n(z, x.data(), n);
  }

  space_stats stats() const override {
    return stats_;
  }

 private:
  static space_buffer make(std::int64_t n) {
    return space_buffer(n > 0 ? new float[static_cast<std::size_t>(n)]() : nullptr, n,
                        &release_host);
  }
  void check_subset(int subset) const {
    CTFORGE_EXPECTS(subset >= -1 && subset < subsets_,
                    fmt::format("subset {} out of range (the space has {})", subset, subsets_));
  }
  const geometry& geom_of(int subset) const {
    if (subset < 0) return g_;
    check_subset(subset);
    return subset_geoms_[static_cast<std::size_t>(subset)];
  }
  std::int64_t projection_size(int subset) const {
    return static_cast<std::int64_t>(views_of(subset).size()) * g_.rows * g_.cols;
  }
  static void check_size(const space_buffer& b, std::int64_t n, const char* what) {
    CTFORGE_EXPECTS(b.size() == n, fmt::format("{}: buffer of {} values where {} are expected",
                                               what, b.size(), n));
  }
  void copy_n(const float* src, float* dst, std::int64_t n) const {
    if (src == dst || n == 0) return;
#pragma omp parallel for schedule(static) num_threads(threads_) if (n > k_parallel_above)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  /// Sum over i of term(i) in double: one partial per thread over a fixed partition, summed in
  /// thread order (the same result for the same thread count).
  template <class F>
  double reduce(std::int64_t n, F term) {
    const partition part{n, threads_};
#pragma omp parallel num_threads(threads_) if (n > k_parallel_above)
    {
      const int t = omp_get_thread_num();
      const int nt = omp_get_num_threads();
      // Fewer threads than asked: each runs the parts of the threads that did not start.
      for (int q = t; q < threads_; q += nt) {
        double s = 0;
        for (std::int64_t i = part.begin(q); i < part.end(q); ++i) s += term(i);
        partials_[static_cast<std::size_t>(q)] = s;
      }
    }
    double sum = 0;
    for (const double s : partials_) sum += s;
    return sum;
  }

  geometry g_;
  volume_geometry vg_;
  int threads_;
  int subsets_ = 1;
  std::vector<std::int64_t> all_views_;
  std::vector<std::vector<std::int64_t>> subset_views_;
  std::vector<geometry> subset_geoms_;
  std::vector<double> partials_;
  std::vector<float> tv_scratch_;
  matched_scratch matched_scratch_;  // the matched back-projector's per-thread volumes
  space_stats stats_;
};

}  // namespace

std::unique_ptr<iterative_space> make_cpu_space(const geometry& g, const volume_geometry& vg,
                                                const space_config& cfg) {
  return std::make_unique<cpu_space>(g, vg, cfg);
}

#if !defined(CTFORGE_WITH_CUDA)
std::unique_ptr<iterative_space> make_cuda_space(const geometry&, const volume_geometry&,
                                                 const space_config&) {
  throw usage_error("--backend cuda: this build of ctforge has no CUDA backend");
}
#endif

std::unique_ptr<iterative_space> make_space(const geometry& g, const volume_geometry& vg,
                                            const space_config& cfg) {
  if (cfg.where == backend::cuda) return make_cuda_space(g, vg, cfg);
  return make_cpu_space(g, vg, cfg);
}

}  // namespace ctforge::detail
