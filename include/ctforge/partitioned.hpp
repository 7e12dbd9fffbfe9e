// Iterative reconstruction with the projections partitioned by views over several processes
// (the workers of a cluster). The method (SIRT, OS-SART, CGLS, FISTA-TV, OSEM: the library's
// own code) runs once, in the process that calls reconstruct_partitioned. Each part holds the
// projections of a contiguous range of views and its share of every projection-sized vector of
// the method, and runs the projector pair for its views and the element-wise steps and
// reductions on its share. The volumes of the method live either in the calling process (per
// forward projection the volume goes to the parts once; per back-projection the parts' volumes
// are summed pairwise in part order where the parts live and one sum comes back) or, when the
// parts hold them (view_parts::holds_volumes), on the parts as z-slabs: then the caller never
// holds a volume but for the result and one array of a state being saved or resumed. The
// result equals reconstruct()'s up to the rounding of those sums and dot products; a given
// partition is deterministic, so a resumed run continues bit for bit.
//
// ctforge.distributed implements view_parts over Dask; local_view_parts holds the parts in this
// process (the tests, and a model for other front ends such as MPI).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctforge/checkpoint.hpp"
#include "ctforge/execution.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// A projection-space step of an iterative method, applied by every part to its share of the
/// buffers `ids` (arguments in the order of the iterative space's functions):
///   fill(x; value), copy(src, dst), axpby(x, y; a, b): y = a x + b y,
///   lincomb(x, y, out; a, b): out = a x + b y, invert_above(x; floor),
///   weighted_residual(w, p, q, out): out = w (p - q), ratio(p, q, out; eps): out = p / q,
///   dot(a, b) and poisson_log_likelihood(p, q): reductions, summed over the parts in order;
/// and on volume buffers held by the parts (volume_subset): weighted_update(x, c, u; lambda,
///   nonnegative): x += lambda c u (then max(x, 0) when nonnegative != 0),
///   clamp_nonnegative(x), multiply_ratio(x, u, s; eps): x *= u / s where s > eps.
enum class part_op {
  fill,
  copy,
  axpby,
  lincomb,
  invert_above,
  weighted_residual,
  ratio,
  dot,
  poisson_log_likelihood,
  weighted_update,
  clamp_nonnegative,
  multiply_ratio
};

/// "fill", "copy", ... (the names Python front ends use).
const char* to_string(part_op op);
/// The op named `name`; usage_error naming it otherwise.
part_op part_op_from_string(std::string_view name);

struct part_call {
  part_op op = part_op::fill;
  std::vector<std::int64_t> ids;  ///< buffers, all of one subset
  std::vector<double> scalars;
};

/// The subset of a volume buffer held by the parts: part k of `count` holds z-planes
/// part_planes(nz, count, k) of it ([z][y][x], its share), so that the whole buffer is the parts'
/// shares one after the other, as for projection buffers.
inline constexpr int volume_subset = -2;

/// Where the projections of a partitioned run live. Buffer `id` of subset s (-1: every view)
/// exists on every part, which holds the buffer's views among its own; the whole buffer is the
/// parts' shares one after the other (the subset's views in increasing order).
class view_parts {
 public:
  virtual ~view_parts() = default;
  /// Whether the parts hold the volumes too (buffers of volume_subset; the *_volume calls
  /// below). false: the volumes are the caller's and only forward / back take them.
  virtual bool holds_volumes() const { return false; }
  /// Makes buffer `id` of subset `subset`, zero-filled, on every part.
  virtual void create(std::int64_t id, int subset) = 0;
  /// Frees buffer `id` (never throws; called from destructors).
  virtual void release(std::int64_t id) noexcept = 0;
  /// Fills buffer `id` with the measured projections of its views (negative values as 0 when
  /// `clamp_negative`: OSEM models non-negative data).
  virtual void load_data(std::int64_t id, int subset, bool clamp_negative) = 0;
  /// |p|^2 of all the measured projections (double, summed over the parts in order).
  virtual double data_norm2() = 0;
  /// y = A_s x on every part (x: the whole volume, [z][y][x]).
  virtual void forward(std::span<const float> x, std::int64_t y, int subset) = 0;
  /// x = the sum over the parts of B_s y (matched: the exact transpose of forward; else the
  /// voxel-driven back-projector); overwrites x.
  virtual void back(std::int64_t y, std::span<float> x, int subset, bool matched) = 0;
  /// An element-wise step (returns 0) or a reduction (the sum over the parts in order).
  virtual double apply(const part_call& call) = 0;
  /// The whole buffer `id` into `host` (checkpoints), and back.
  virtual void download(std::int64_t id, std::span<float> host) = 0;
  virtual void upload(std::span<const float> host, std::int64_t id) = 0;

  // -- when the parts hold the volumes (holds_volumes(); else these throw) -----------------------
  /// y = A_s x, x a volume buffer on the parts (each part gathers the whole of it).
  virtual void forward_volume(std::int64_t x, std::int64_t y, int subset);
  /// Volume buffer x = the parts' B_s y summed pairwise in part order (as back()), each part
  /// keeping its own planes of the sum.
  virtual void back_volume(std::int64_t y, std::int64_t x, int subset, bool matched);
  /// tv_prox of volume buffer x (the iterative space's; on the whole volume, gathered on a part).
  virtual void tv_prox_volume(std::int64_t x, float weight, int iterations, bool nonnegative);
  /// The total variation of volume buffer x (the iterative space's).
  virtual double total_variation_volume(std::int64_t x);
  /// The method has ended with its result in volume buffer x: true when the parts have taken
  /// it where it goes (their front end wrote each part's planes into the output), so that it
  /// does not come to the caller; reconstruct_partitioned then returns a volume with the grid
  /// and no data. false (the default): the caller receives it.
  virtual bool keep_result(std::int64_t x);
};

/// One part: views [v0, v1) of geometry g with their projections, and its share of every
/// buffer of a partitioned run. It computes where `ctx` says (CPU or a CUDA device). What a
/// worker of ctforge.distributed keeps; local_view_parts keeps several.
class view_part {
 public:
  /// `data`: the projections of views [v0, v1) ([v1 - v0][rows][cols]); `subsets`: the subset
  /// count of the method (subset s holds the views v with v % subsets == s of the whole
  /// geometry, as in one process).
  /// `planes`: its z-planes [first, end) of the volume buffers when the parts hold the volumes
  /// (part_planes; may be empty), {0, 0} otherwise.
  view_part(const geometry& g, const volume_geometry& vg, std::int64_t v0, std::int64_t v1,
            std::vector<float> data, const execution_context& ctx, int subsets,
            std::pair<std::int64_t, std::int64_t> planes = {0, 0});
  view_part(view_part&&) noexcept;
  view_part& operator=(view_part&&) noexcept;
  ~view_part();

  std::int64_t first_view() const;
  std::int64_t end_view() const;
  /// Its z-planes [first, end) of the volume buffers (empty when the parts hold no volumes).
  std::pair<std::int64_t, std::int64_t> planes() const;
  /// How many of its views subset s holds (-1: all of them).
  std::int64_t views_in(int subset) const;
  /// Floats of its share of a buffer of subset s, and of buffer `id`.
  std::int64_t share_size(int subset) const;
  std::int64_t size_of(std::int64_t id) const;

  void create(std::int64_t id, int subset);
  void release(std::int64_t id) noexcept;
  void load_data(std::int64_t id, int subset, bool clamp_negative);
  double data_norm2() const;
  void forward(std::span<const float> x, std::int64_t y, int subset);
  /// x = B_s y over its own views only (overwrites x; zero when it holds none of subset s).
  void back(std::int64_t y, std::span<float> x, int subset, bool matched);
  double apply(const part_call& call);
  /// Its share of buffer `id`.
  void download(std::int64_t id, std::span<float> host) const;
  void upload(std::span<const float> host, std::int64_t id);
  /// tv_prox / total_variation of a whole volume x ([z][y][x]), where the part computes: the
  /// step a FISTA-TV run whose parts hold the volumes takes on one part.
  void tv_prox(std::span<float> x, float weight, int iterations, bool nonnegative);
  double total_variation(std::span<const float> x);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// View range [first, end) of part k of `count` over `views` views (about equal, contiguous).
std::pair<std::int64_t, std::int64_t> part_views(std::int64_t views, int count, int k);
/// Z-planes [first, end) of the volume buffers that part k of `count` holds (about equal,
/// contiguous; empty for some parts when there are more parts than planes).
std::pair<std::int64_t, std::int64_t> part_planes(std::int64_t nz, int count, int k);

/// The subset count a method partitioned over views uses (opt.subsets for OS-SART and OSEM,
/// clamped to the view count; 1 otherwise).
int method_subsets(const recon_options& opt, const geometry& g);

/// view_parts held in this process, the parts one after the other.
class local_view_parts final : public view_parts {
 public:
  /// `hold_volumes`: the parts hold the volumes (each made with its part_planes).
  explicit local_view_parts(std::vector<view_part> parts, bool hold_volumes = false);
  /// `count` parts (part_views) of the whole projections `proj`, computing where opt says.
  static local_view_parts split(const projection_view& proj, const geometry& g,
                                const volume_geometry& vg, const recon_options& opt, int count,
                                bool hold_volumes = false);

  bool holds_volumes() const override { return hold_volumes_; }
  void create(std::int64_t id, int subset) override;
  void release(std::int64_t id) noexcept override;
  void load_data(std::int64_t id, int subset, bool clamp_negative) override;
  double data_norm2() override;
  void forward(std::span<const float> x, std::int64_t y, int subset) override;
  void back(std::int64_t y, std::span<float> x, int subset, bool matched) override;
  double apply(const part_call& call) override;
  void download(std::int64_t id, std::span<float> host) override;
  void upload(std::span<const float> host, std::int64_t id) override;
  void forward_volume(std::int64_t x, std::int64_t y, int subset) override;
  void back_volume(std::int64_t y, std::int64_t x, int subset, bool matched) override;
  void tv_prox_volume(std::int64_t x, float weight, int iterations, bool nonnegative) override;
  double total_variation_volume(std::int64_t x) override;

 private:
  std::vector<float> gather(std::int64_t id);
  std::int64_t size_of(std::int64_t id) const;
  std::vector<view_part> parts_;
  bool hold_volumes_ = false;
};

/// Sums `volumes` pairwise in order (((0 + 1) + (2 + 3)) + ...): the reduction the parts'
/// back-projections go through, the same in every front end. Consumes them; the sum is
/// volumes[0]'s storage.
std::vector<float> pairwise_sum(std::vector<std::vector<float>> volumes);

/// reconstruct() with iterative method opt.algo whose projections `parts` hold (views of g,
/// partitioned); the volumes and the method's own steps on them run here, on the CPU, unless
/// the parts hold the volumes (then only the result comes here, and not even that when
/// parts.keep_result takes it: the volume returned has no data).
volume reconstruct_partitioned(view_parts& parts, const geometry& g, const volume_geometry& vg,
                               const recon_options& opt);

/// reconstruct_partitioned with the method's state saved into co.dir in the library's format
/// (two alternating slots, as reconstruct_resumable) and resumed from there: one format for
/// one-process and partitioned runs. `run_record_json` describes the inputs (and the partition).
volume reconstruct_partitioned_resumable(view_parts& parts, const geometry& g,
                                         const volume_geometry& vg, recon_options opt,
                                         const checkpoint_options& co,
                                         std::string_view run_record_json,
                                         const std::function<void(const std::string&)>& note = {});

}  // namespace ctforge
