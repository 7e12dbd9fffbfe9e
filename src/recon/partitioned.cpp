// Iterative methods over projections partitioned by views (include/ctforge/partitioned.hpp):
// a part (view_part) keeps one iterative space per subset over its own views; the run's space
// (partitioned_space) keeps the volumes in a CPU space and hands every projection-sized buffer
// and step to the parts through view_parts.
#include "ctforge/partitioned.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/enum_names.hpp"
#include "core/parallel_copy.hpp"
#include "core/projection_checks.hpp"
#include "ctforge/error.hpp"
#include "recon/iterative/iterative.hpp"

namespace ctforge {

namespace {
constexpr detail::enum_name<part_op> k_op_names[] = {
    {part_op::fill, "fill"},
    {part_op::copy, "copy"},
    {part_op::axpby, "axpby"},
    {part_op::lincomb, "lincomb"},
    {part_op::invert_above, "invert_above"},
    {part_op::weighted_residual, "weighted_residual"},
    {part_op::ratio, "ratio"},
    {part_op::dot, "dot"},
    {part_op::poisson_log_likelihood, "poisson_log_likelihood"},
    {part_op::weighted_update, "weighted_update"},
    {part_op::clamp_nonnegative, "clamp_nonnegative"},
    {part_op::multiply_ratio, "multiply_ratio"}};

/// (buffers, scalars) each op takes.
std::pair<std::size_t, std::size_t> arity(part_op op) {
  switch (op) {
    case part_op::fill:
    case part_op::invert_above:
      return {1, 1};
    case part_op::copy:
    case part_op::dot:
    case part_op::poisson_log_likelihood:
      return {2, 0};
    case part_op::axpby:
      return {2, 2};
    case part_op::lincomb:
      return {3, 2};
    case part_op::weighted_residual:
      return {4, 0};
    case part_op::ratio:
    case part_op::multiply_ratio:
      return {3, 1};
    case part_op::weighted_update:
      return {3, 2};
    case part_op::clamp_nonnegative:
      return {1, 0};
  }
  return {0, 0};
}
}  // namespace

const char* to_string(part_op op) {
  return detail::name_of(op, k_op_names, "?");
}

part_op part_op_from_string(std::string_view name) {
  for (const auto& e : k_op_names)
    if (name == e.second) return e.first;
  throw usage_error(fmt::format("partitioned step '{}': not one of fill, copy, axpby, lincomb, "
                                "invert_above, weighted_residual, ratio, dot, "
                                "poisson_log_likelihood, weighted_update, clamp_nonnegative, "
                                "multiply_ratio",
                                name));
}

std::pair<std::int64_t, std::int64_t> part_views(std::int64_t views, int count, int k) {
  CTFORGE_EXPECTS(count >= 1 && k >= 0 && k < count,
                  fmt::format("part {} of {}: out of range", k, count));
  return {views * k / count, views * (k + 1) / count};
}

std::pair<std::int64_t, std::int64_t> part_planes(std::int64_t nz, int count, int k) {
  return part_views(nz, count, k);
}

int method_subsets(const recon_options& opt, const geometry& g) {
  if (opt.algo != algorithm::os_sart && opt.algo != algorithm::osem) return 1;
  return static_cast<int>(std::clamp<std::int64_t>(opt.subsets, 1, std::max<std::int64_t>(
                                                                       g.view_count(), 1)));
}

std::vector<float> pairwise_sum(std::vector<std::vector<float>> volumes) {
  CTFORGE_EXPECTS(!volumes.empty(), "pairwise_sum: no volumes");
  for (std::size_t stride = 1; stride < volumes.size(); stride *= 2)
    for (std::size_t i = 0; i + stride < volumes.size(); i += 2 * stride) {
      std::vector<float>& a = volumes[i];
      const std::vector<float>& b = volumes[i + stride];
      CTFORGE_EXPECTS(a.size() == b.size(), "pairwise_sum: volumes of different sizes");
      for (std::size_t j = 0; j < a.size(); ++j) a[j] += b[j];
    }
  return std::move(volumes[0]);
}

// ---- one part ------------------------------------------------------------------------------

struct view_part::impl {
  struct subset_space {
    std::vector<std::int64_t> local;  ///< its views among the part's, 0-based from v0
    std::unique_ptr<detail::iterative_space> space;  ///< none when it holds no view
  };
  struct buffer {
    int subset;
    detail::space_buffer data;
  };

  geometry g;
  volume_geometry vg;
  std::int64_t v0, v1, pixels;
  std::int64_t z0 = 0, z1 = 0;  ///< its planes of the volume buffers (parts holding volumes)
  std::vector<float> data;
  detail::space_config cfg;
  int subsets;
  std::map<int, subset_space> spaces;
  /// The space of its planes of the volume buffers (a grid of z1 - z0 planes; none when empty).
  std::unique_ptr<detail::iterative_space> slab;
  // (after the spaces: the buffers go before the spaces that made them)
  detail::space_buffer vol;  ///< the volume each forward / back goes through
  std::unordered_map<std::int64_t, buffer> buffers;

  subset_space& space_of(int s) {
    CTFORGE_EXPECTS(s >= -1 && s < subsets,
                    fmt::format("subset {} out of range (the run has {})", s, subsets));
    auto it = spaces.find(s);
    if (it != spaces.end()) return it->second;
    subset_space ss;
    std::vector<std::int64_t> global;
    for (std::int64_t v = v0; v < v1; ++v)
      if (s < 0 || v % subsets == s) {
        ss.local.push_back(v - v0);
        global.push_back(v);
      }
    if (!global.empty()) {
      ss.space = detail::make_space(detail::select_views(g, global), vg, cfg);
      if (vol.empty()) vol = ss.space->volume();
    }
    return spaces.emplace(s, std::move(ss)).first->second;
  }
  buffer& find(std::int64_t id) {
    auto it = buffers.find(id);
    CTFORGE_EXPECTS(it != buffers.end(), fmt::format("views {}..{}: no buffer {}", v0, v1 - 1, id));
    return it->second;
  }
  const buffer& find(std::int64_t id) const { return const_cast<impl*>(this)->find(id); }
  /// The space buffers of subset s live in (none: the part holds none of it).
  detail::iterative_space* space_for(int s) {
    if (s != volume_subset) return space_of(s).space.get();
    if (!slab && z1 > z0) {
      volume_geometry planes = vg;
      planes.nz = z1 - z0;
      planes.origin_mm[2] += static_cast<double>(z0) * vg.spacing_mm[2];
      slab = detail::make_space(detail::select_views(g, std::vector<std::int64_t>{v0}), planes,
                                cfg);
    }
    return slab.get();
  }
  /// The whole-volume buffer `vol` holding x, in the space of all its views.
  detail::iterative_space& whole(std::span<const float> x, const char* what) {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(x.size()) == vg.voxel_count(),
                    fmt::format("{}: a volume of {} values, the grid has {}", what, x.size(),
                                vg.voxel_count()));
    detail::iterative_space& sp = *space_of(-1).space;  // (every part holds a view)
    sp.upload(x, vol);
    return sp;
  }
};

view_part::view_part(const geometry& g, const volume_geometry& vg, std::int64_t v0,
                     std::int64_t v1, std::vector<float> data, const execution_context& ctx,
                     int subsets, std::pair<std::int64_t, std::int64_t> planes)
    : impl_(std::make_unique<impl>()) {
  g.validate();
  vg.validate();
  CTFORGE_EXPECTS(0 <= v0 && v0 < v1 && v1 <= g.view_count(),
                  fmt::format("views {}..{}: not a range of the geometry's {} views", v0, v1 - 1,
                              g.view_count()));
  CTFORGE_EXPECTS(subsets >= 1, fmt::format("subsets: must be >= 1 (got {})", subsets));
  CTFORGE_EXPECTS(0 <= planes.first && planes.first <= planes.second && planes.second <= vg.nz,
                  fmt::format("planes {}..{}: not a range of the grid's {} planes", planes.first,
                              planes.second - 1, vg.nz));
  const std::int64_t pixels = g.rows * g.cols;
  CTFORGE_EXPECTS(static_cast<std::int64_t>(data.size()) == (v1 - v0) * pixels,
                  fmt::format("views {}..{}: the projections hold {} values, {} views of {} x {} "
                              "pixels need {}",
                              v0, v1 - 1, data.size(), v1 - v0, g.rows, g.cols,
                              (v1 - v0) * pixels));
  detail::check_finite_values(projection_view(v1 - v0, g.rows, g.cols, data), ctx.threads);
  impl& m = *impl_;
  m.g = g;
  m.vg = vg;
  m.v0 = v0;
  m.v1 = v1;
  m.z0 = planes.first;
  m.z1 = planes.second;
  m.pixels = pixels;
  m.data = std::move(data);
  static_cast<execution_context&>(m.cfg) = ctx;
  m.cfg.where = resolve_backend(ctx.where, nullptr, ctx.device);
  m.cfg.subset_count = 1;
  m.subsets = subsets;
}

view_part::view_part(view_part&&) noexcept = default;
view_part& view_part::operator=(view_part&&) noexcept = default;
view_part::~view_part() = default;

std::int64_t view_part::first_view() const {
  return impl_->v0;
}
std::int64_t view_part::end_view() const {
  return impl_->v1;
}
std::pair<std::int64_t, std::int64_t> view_part::planes() const {
  return {impl_->z0, impl_->z1};
}
std::int64_t view_part::views_in(int subset) const {
  return static_cast<std::int64_t>(impl_->space_of(subset).local.size());
}
std::int64_t view_part::share_size(int subset) const {
  return views_in(subset) * impl_->pixels;
}
std::int64_t view_part::size_of(std::int64_t id) const {
  return impl_->find(id).data.size();
}

void view_part::create(std::int64_t id, int subset) {
  CTFORGE_EXPECTS(!impl_->buffers.count(id), fmt::format("buffer {} exists already", id));
  detail::iterative_space* sp = impl_->space_for(subset);
  detail::space_buffer b;
  if (sp) b = subset == volume_subset ? sp->volume() : sp->projections(-1);
  impl_->buffers.emplace(id, impl::buffer{subset, std::move(b)});
}

void view_part::release(std::int64_t id) noexcept {
  impl_->buffers.erase(id);
}

void view_part::load_data(std::int64_t id, int subset, bool clamp_negative) {
  impl::buffer& b = impl_->find(id);
  CTFORGE_EXPECTS(b.subset == subset && subset != volume_subset,
                  fmt::format("buffer {}: of subset {}, not {}", id, b.subset, subset));
  impl::subset_space& ss = impl_->space_of(subset);
  if (!ss.space) return;
  const std::int64_t px = impl_->pixels;
  std::vector<float> host(static_cast<std::size_t>(b.data.size()));
  for (std::size_t k = 0; k < ss.local.size(); ++k)
    std::copy_n(impl_->data.data() + ss.local[k] * px, px,
                host.data() + static_cast<std::int64_t>(k) * px);
  if (clamp_negative)
    for (float& v : host) v = std::max(v, 0.0f);
  ss.space->upload(host, b.data);
}

double view_part::data_norm2() const {
  double s = 0;
  for (const float v : impl_->data) s += static_cast<double>(v) * v;
  return s;
}

void view_part::forward(std::span<const float> x, std::int64_t y, int subset) {
  impl::buffer& b = impl_->find(y);
  impl::subset_space& ss = impl_->space_of(subset);
  if (!ss.space) return;
  CTFORGE_EXPECTS(static_cast<std::int64_t>(x.size()) == impl_->vg.voxel_count(),
                  fmt::format("forward: a volume of {} values, the grid has {}", x.size(),
                              impl_->vg.voxel_count()));
  ss.space->upload(x, impl_->vol);
  ss.space->forward(impl_->vol, b.data, -1);
}

void view_part::back(std::int64_t y, std::span<float> x, int subset, bool matched) {
  const impl::buffer& b = impl_->find(y);
  impl::subset_space& ss = impl_->space_of(subset);
  CTFORGE_EXPECTS(static_cast<std::int64_t>(x.size()) == impl_->vg.voxel_count(),
                  fmt::format("back: a volume of {} values, the grid has {}", x.size(),
                              impl_->vg.voxel_count()));
  if (!ss.space) {
    std::fill(x.begin(), x.end(), 0.0f);
    return;
  }
  ss.space->back(b.data, impl_->vol, -1,
                 matched ? detail::backprojector_kind::matched : detail::backprojector_kind::voxel);
  ss.space->download(impl_->vol, x);
}

double view_part::apply(const part_call& call) {
  const auto [n_ids, n_scalars] = arity(call.op);
  CTFORGE_EXPECTS(call.ids.size() == n_ids && call.scalars.size() == n_scalars,
                  fmt::format("partitioned step {}: takes {} buffers and {} scalars (got {} and {})",
                              to_string(call.op), n_ids, n_scalars, call.ids.size(),
                              call.scalars.size()));
  std::vector<detail::space_buffer*> b;
  for (const std::int64_t id : call.ids) b.push_back(&impl_->find(id).data);
  const int subset = impl_->find(call.ids[0]).subset;
  for (const std::int64_t id : call.ids)
    CTFORGE_EXPECTS(impl_->find(id).subset == subset,
                    fmt::format("partitioned step {}: buffers of different subsets",
                                to_string(call.op)));
  const bool volumes = call.op == part_op::weighted_update ||
                       call.op == part_op::clamp_nonnegative || call.op == part_op::multiply_ratio;
  CTFORGE_EXPECTS(!volumes || subset == volume_subset,
                  fmt::format("partitioned step {}: for volume buffers", to_string(call.op)));
  detail::iterative_space* sp = impl_->space_for(subset);
  if (!sp) return 0.0;  // it holds none of the subset's views (or planes)
  const auto f = [&](std::size_t i) { return static_cast<float>(call.scalars[i]); };
  switch (call.op) {
    case part_op::fill:
      sp->fill(*b[0], f(0));
      break;
    case part_op::copy:
      sp->copy(*b[0], *b[1]);
      break;
    case part_op::axpby:
      sp->axpby(f(0), *b[0], f(1), *b[1]);
      break;
    case part_op::lincomb:
      sp->lincomb(f(0), *b[0], f(1), *b[1], *b[2]);
      break;
    case part_op::invert_above:
      sp->invert_above(*b[0], f(0));
      break;
    case part_op::weighted_residual:
      sp->weighted_residual(*b[0], *b[1], *b[2], *b[3]);
      break;
    case part_op::ratio:
      sp->ratio(*b[0], *b[1], f(0), *b[2]);
      break;
    case part_op::dot:
      return sp->dot(*b[0], *b[1]);
    case part_op::poisson_log_likelihood:
      return sp->poisson_log_likelihood(*b[0], *b[1]);
    case part_op::weighted_update:
      sp->weighted_update(*b[0], f(0), *b[1], *b[2], call.scalars[1] != 0);
      break;
    case part_op::clamp_nonnegative:
      sp->clamp_nonnegative(*b[0]);
      break;
    case part_op::multiply_ratio:
      sp->multiply_ratio(*b[0], *b[1], *b[2], f(0));
      break;
  }
  return 0.0;
}

void view_part::download(std::int64_t id, std::span<float> host) const {
  const impl::buffer& b = impl_->find(id);
  if (b.data.empty()) return;
  impl_->space_for(b.subset)->download(b.data, host);
}

void view_part::upload(std::span<const float> host, std::int64_t id) {
  impl::buffer& b = impl_->find(id);
  if (b.data.empty()) return;
  impl_->space_for(b.subset)->upload(host, b.data);
}

void view_part::tv_prox(std::span<float> x, float weight, int iterations, bool nonnegative) {
  detail::iterative_space& sp = impl_->whole(x, "tv_prox");
  sp.tv_prox(impl_->vol, weight, iterations, nonnegative);
  sp.download(impl_->vol, x);
}

double view_part::total_variation(std::span<const float> x) {
  return impl_->whole(x, "total_variation").total_variation(impl_->vol);
}

// ---- volumes on the parts ----------------------------------------------------------------------

namespace {
[[noreturn]] void not_holding(const char* what) {
  throw error(fmt::format("partitioned run: {} of a volume on the parts, but these parts do not "
                          "hold the volumes",
                          what));
}
}  // namespace

void view_parts::forward_volume(std::int64_t, std::int64_t, int) {
  not_holding("forward projection");
}
void view_parts::back_volume(std::int64_t, std::int64_t, int, bool) {
  not_holding("back-projection");
}
void view_parts::tv_prox_volume(std::int64_t, float, int, bool) {
  not_holding("tv_prox");
}
double view_parts::total_variation_volume(std::int64_t) {
  not_holding("total variation");
}
bool view_parts::keep_result(std::int64_t) {
  return false;
}

// ---- parts in this process -------------------------------------------------------------------

local_view_parts::local_view_parts(std::vector<view_part> parts, bool hold_volumes)
    : parts_(std::move(parts)), hold_volumes_(hold_volumes) {
  CTFORGE_EXPECTS(!parts_.empty(), "partitioned run: no parts");
  // Volumes held: the parts' planes follow each other (their shares make the volume in order).
  std::int64_t z = 0;
  for (const view_part& p : parts_) {
    const auto [z0, z1] = p.planes();
    CTFORGE_EXPECTS(hold_volumes ? z0 == z : z1 == z0,
                    fmt::format("partitioned run: views {}..{} hold planes {}..{}, {}",
                                p.first_view(), p.end_view() - 1, z0, z1 - 1,
                                hold_volumes ? fmt::format("not from plane {}", z)
                                             : "but the parts do not hold the volumes"));
    z = z1;
  }
}

local_view_parts local_view_parts::split(const projection_view& proj, const geometry& g,
                                         const volume_geometry& vg, const recon_options& opt,
                                         int count, bool hold_volumes) {
  require_host(proj, "partitioned run");
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("projections are {} views x {} rows x {} cols but the geometry has "
                              "{} x {} x {}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(count >= 1 && count <= g.view_count(),
                  fmt::format("parts: must be in [1, {}] (the views; got {})", g.view_count(),
                              count));
  std::vector<view_part> parts;
  const std::int64_t px = g.rows * g.cols;
  for (int k = 0; k < count; ++k) {
    const auto [a, b] = part_views(g.view_count(), count, k);
    std::vector<float> data(proj.data.begin() + a * px, proj.data.begin() + b * px);
    const auto planes = hold_volumes ? part_planes(vg.nz, count, k)
                                     : std::pair<std::int64_t, std::int64_t>{0, 0};
    parts.emplace_back(g, vg, a, b, std::move(data), opt, method_subsets(opt, g), planes);
  }
  return local_view_parts(std::move(parts), hold_volumes);
}

void local_view_parts::create(std::int64_t id, int subset) {
  for (auto& p : parts_) p.create(id, subset);
}
void local_view_parts::release(std::int64_t id) noexcept {
  for (auto& p : parts_) p.release(id);
}
void local_view_parts::load_data(std::int64_t id, int subset, bool clamp_negative) {
  for (auto& p : parts_) p.load_data(id, subset, clamp_negative);
}
double local_view_parts::data_norm2() {
  double s = 0;
  for (auto& p : parts_) s += p.data_norm2();
  return s;
}
void local_view_parts::forward(std::span<const float> x, std::int64_t y, int subset) {
  for (auto& p : parts_) p.forward(x, y, subset);
}
void local_view_parts::back(std::int64_t y, std::span<float> x, int subset, bool matched) {
  std::vector<std::vector<float>> each;
  for (auto& p : parts_) {
    each.emplace_back(x.size());
    p.back(y, each.back(), subset, matched);
  }
  const std::vector<float> sum = pairwise_sum(std::move(each));
  std::copy(sum.begin(), sum.end(), x.begin());
}
double local_view_parts::apply(const part_call& call) {
  double s = 0;
  for (auto& p : parts_) s += p.apply(call);
  return s;
}
void local_view_parts::download(std::int64_t id, std::span<float> host) {
  std::size_t at = 0;
  for (auto& p : parts_) {
    const auto n = static_cast<std::size_t>(p.size_of(id));
    CTFORGE_EXPECTS(at + n <= host.size(), fmt::format("download: buffer {} holds more than {} "
                                                       "values", id, host.size()));
    p.download(id, host.subspan(at, n));
    at += n;
  }
  CTFORGE_EXPECTS(at == host.size(),
                  fmt::format("download: buffer {} holds {} values, not {}", id, at, host.size()));
}
void local_view_parts::upload(std::span<const float> host, std::int64_t id) {
  std::size_t at = 0;
  for (auto& p : parts_) {
    const auto n = static_cast<std::size_t>(p.size_of(id));
    CTFORGE_EXPECTS(at + n <= host.size(), fmt::format("upload: buffer {} holds more than {} "
                                                       "values", id, host.size()));
    p.upload(host.subspan(at, n), id);
    at += n;
  }
  CTFORGE_EXPECTS(at == host.size(),
                  fmt::format("upload: buffer {} holds {} values, not {}", id, at, host.size()));
}

std::vector<float> local_view_parts::gather(std::int64_t id) {
  CTFORGE_EXPECTS(hold_volumes_, "partitioned run: these parts do not hold the volumes");
  std::vector<float> x(static_cast<std::size_t>(size_of(id)));
  download(id, x);
  return x;
}
std::int64_t local_view_parts::size_of(std::int64_t id) const {
  std::int64_t n = 0;
  for (const auto& p : parts_) n += p.size_of(id);
  return n;
}
void local_view_parts::forward_volume(std::int64_t x, std::int64_t y, int subset) {
  const std::vector<float> whole = gather(x);
  forward(whole, y, subset);
}
void local_view_parts::back_volume(std::int64_t y, std::int64_t x, int subset, bool matched) {
  std::vector<float> sum(static_cast<std::size_t>(size_of(x)));
  back(y, sum, subset, matched);
  upload(sum, x);
}
void local_view_parts::tv_prox_volume(std::int64_t x, float weight, int iterations,
                                      bool nonnegative) {
  std::vector<float> whole = gather(x);
  parts_.front().tv_prox(whole, weight, iterations, nonnegative);
  upload(whole, x);
}
double local_view_parts::total_variation_volume(std::int64_t x) {
  const std::vector<float> whole = gather(x);
  return parts_.front().total_variation(whole);
}

}  // namespace ctforge
