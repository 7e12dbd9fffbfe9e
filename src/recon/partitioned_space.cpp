// The iterative space of a partitioned run (include/ctforge/partitioned.hpp): projection
// buffers on the parts; volumes in a CPU space of this process, or on the parts too when they
// hold the volumes. A buffer on the parts is a token (its id there) in a space_buffer of the
// buffer's logical size; every step on such buffers goes to view_parts, every step on local
// volumes to the CPU space, and the projector pair crosses between them.
#include <fmt/format.h>

#include <unordered_set>

#include "ctforge/error.hpp"
#include "ctforge/partitioned.hpp"
#include "recon/iterative/iterative.hpp"

namespace ctforge {
namespace {

using detail::backprojector_kind;
using detail::space_buffer;

class partitioned_space final : public detail::iterative_space {
 public:
  partitioned_space(view_parts& parts, const geometry& g, const volume_geometry& vg,
                    const recon_options& opt)
      : parts_(parts), g_(g), vg_(vg), subsets_(method_subsets(opt, g)),
        volumes_on_parts_(parts.holds_volumes()) {
    detail::space_config cfg = detail::space_config_for(opt, backend::cpu);
    cfg.subset_count = 1;
    local_ = detail::make_cpu_space(g, vg, cfg);
    for (std::int64_t v = 0; v < g.view_count(); ++v) all_views_.push_back(v);
    subset_views_.resize(static_cast<std::size_t>(subsets_));
    for (std::int64_t v = 0; v < g.view_count(); ++v)
      subset_views_[static_cast<std::size_t>(v % subsets_)].push_back(v);
  }

  /// Fills projection buffer b with the measured data of its views.
  void load(space_buffer& b, int subset, bool clamp) { parts_.load_data(id(b), subset, clamp); }

  backend where() const override { return backend::cpu; }
  const geometry& geom() const override { return g_; }
  const volume_geometry& grid() const override { return vg_; }
  int subset_count() const override { return subsets_; }
  const std::vector<std::int64_t>& views_of(int subset) const override {
    if (subset < 0) return all_views_;
    CTFORGE_EXPECTS(subset < subsets_,
                    fmt::format("subset {} out of range (the run has {})", subset, subsets_));
    return subset_views_[static_cast<std::size_t>(subset)];
  }

  space_buffer volume() override {
    if (!volumes_on_parts_) return local_->volume();
    return on_parts(volume_subset, vg_.voxel_count());
  }
  space_buffer projections(int subset) override {
    return on_parts(subset, static_cast<std::int64_t>(views_of(subset).size()) * g_.rows * g_.cols);
  }
  void upload(std::span<const float> host, space_buffer& dst) override {
    if (remote(dst))
      parts_.upload(host, id(dst));
    else
      local_->upload(host, dst);
  }
  void download(const space_buffer& src, std::span<float> host) override {
    if (remote(src))
      parts_.download(id(src), host);
    else
      local_->download(src, host);
  }

  void forward(const space_buffer& x, space_buffer& y, int subset) override {
    const space_buffer& v = volume_of(x, "forward");
    if (volumes_on_parts_)
      parts_.forward_volume(id(v), id(y), subset);
    else
      parts_.forward({v.data(), static_cast<std::size_t>(v.size())}, id(y), subset);
    ++forward_calls_;
  }
  void back(const space_buffer& y, space_buffer& x, int subset, backprojector_kind kind) override {
    const bool matched = kind == backprojector_kind::matched;
    space_buffer& v = volume_of(x, "back");
    if (volumes_on_parts_)
      parts_.back_volume(id(y), id(v), subset, matched);
    else
      parts_.back(id(y), {v.data(), static_cast<std::size_t>(v.size())}, subset, matched);
    ++back_calls_;
  }

  void fill(space_buffer& x, float value) override {
    if (remote(x)) return call(part_op::fill, {&x}, {value});
    local_->fill(x, value);
  }
  void copy(const space_buffer& src, space_buffer& dst) override {
    if (remote(src, dst)) return call(part_op::copy, {&src, &dst}, {});
    local_->copy(src, dst);
  }
  void axpby(float a, const space_buffer& x, float b, space_buffer& y) override {
    if (remote(x, y)) return call(part_op::axpby, {&x, &y}, {a, b});
    local_->axpby(a, x, b, y);
  }
  void lincomb(float a, const space_buffer& x, float b, const space_buffer& y,
               space_buffer& out) override {
    if (remote(x, y, out)) return call(part_op::lincomb, {&x, &y, &out}, {a, b});
    local_->lincomb(a, x, b, y, out);
  }
  void invert_above(space_buffer& x, float floor) override {
    if (remote(x)) return call(part_op::invert_above, {&x}, {floor});
    local_->invert_above(x, floor);
  }
  void weighted_residual(const space_buffer& w, const space_buffer& p, const space_buffer& q,
                         space_buffer& out) override {
    if (remote(w, p, q, out)) return call(part_op::weighted_residual, {&w, &p, &q, &out}, {});
    local_->weighted_residual(w, p, q, out);
  }
  void weighted_update(space_buffer& x, float lambda, const space_buffer& c, const space_buffer& u,
                       bool nonnegative) override {
    volume_of(x, "weighted_update");
    if (volumes_on_parts_)
      return call(part_op::weighted_update, {&x, &c, &u}, {lambda, nonnegative ? 1.0 : 0.0});
    local_->weighted_update(x, lambda, c, u, nonnegative);
  }
  void clamp_nonnegative(space_buffer& x) override {
    volume_of(x, "clamp_nonnegative");
    if (volumes_on_parts_) return call(part_op::clamp_nonnegative, {&x}, {});
    local_->clamp_nonnegative(x);
  }
  void ratio(const space_buffer& p, const space_buffer& q, float eps, space_buffer& out) override {
    if (remote(p, q, out)) return call(part_op::ratio, {&p, &q, &out}, {eps});
    local_->ratio(p, q, eps, out);
  }
  void multiply_ratio(space_buffer& x, const space_buffer& u, const space_buffer& s,
                      float eps) override {
    volume_of(x, "multiply_ratio");
    if (volumes_on_parts_) return call(part_op::multiply_ratio, {&x, &u, &s}, {eps});
    local_->multiply_ratio(x, u, s, eps);
  }
  double dot(const space_buffer& a, const space_buffer& b) override {
    if (remote(a, b)) return parts_.apply({part_op::dot, {id(a), id(b)}, {}});
    return local_->dot(a, b);
  }
  double poisson_log_likelihood(const space_buffer& p, const space_buffer& q) override {
    if (remote(p, q)) return parts_.apply({part_op::poisson_log_likelihood, {id(p), id(q)}, {}});
    return local_->poisson_log_likelihood(p, q);
  }
  void tv_prox(space_buffer& x, float weight, int iterations, bool nonnegative) override {
    volume_of(x, "tv_prox");
    if (volumes_on_parts_) return parts_.tv_prox_volume(id(x), weight, iterations, nonnegative);
    local_->tv_prox(x, weight, iterations, nonnegative);
  }
  double total_variation(const space_buffer& x) override {
    volume_of(x, "total_variation");
    if (volumes_on_parts_) return parts_.total_variation_volume(id(x));
    return local_->total_variation(x);
  }

  bool stream_state() const override { return volumes_on_parts_; }
  bool keep_result(const space_buffer& x) override {
    return volumes_on_parts_ && parts_.keep_result(id(volume_of(x, "the result")));
  }

  detail::space_stats stats() const override {
    detail::space_stats s = local_->stats();
    s.buffers_allocated += made_;
    s.forward_calls = forward_calls_;
    s.back_calls = back_calls_;
    return s;
  }

 private:
  struct token {
    partitioned_space* owner;
    std::int64_t id;
    bool volume;  ///< a volume buffer (subset volume_subset), else projections
  };
  /// A new buffer of `subset` (volume_subset: a volume) on the parts, of `size` floats.
  space_buffer on_parts(int subset, std::int64_t size) {
    const std::int64_t id = next_id_++;
    parts_.create(id, subset);
    auto* t = new token{this, id, subset == volume_subset};
    tokens_.insert(t);
    ++made_;
    return space_buffer(reinterpret_cast<float*>(t), size, &release_token);
  }
  static void release_token(float* p) noexcept {
    auto* t = reinterpret_cast<token*>(p);
    t->owner->tokens_.erase(t);
    t->owner->parts_.release(t->id);
    delete t;
  }
  const token* token_of(const space_buffer& b) const {
    auto* t = reinterpret_cast<token*>(b.data());
    return tokens_.count(t) ? t : nullptr;
  }
  std::int64_t id(const space_buffer& b) const {
    const token* t = token_of(b);
    CTFORGE_EXPECTS(t != nullptr, "partitioned run: a volume where projections belong");
    return t->id;
  }
  /// Whether the buffers are projections (on the parts): all of them, or none (else an error).
  template <class... B>
  bool remote(const B&... b) const {
    const bool any = (... || (token_of(b) != nullptr));
    const bool all = (... && (token_of(b) != nullptr));
    CTFORGE_EXPECTS(any == all, "partitioned run: a step mixing volumes and projections");
    return all;
  }
  /// b, checked to be a volume (where this run keeps them).
  template <class B>
  B& volume_of(B& b, const char* what) const {
    const token* t = token_of(b);
    CTFORGE_EXPECTS(volumes_on_parts_ ? (t && t->volume) : !t,
                    fmt::format("partitioned run: {}: projections where a volume belongs", what));
    return b;
  }
  void call(part_op op, std::initializer_list<const space_buffer*> bufs,
            std::initializer_list<double> scalars) {
    part_call c{op, {}, scalars};
    for (const space_buffer* b : bufs) c.ids.push_back(id(*b));
    parts_.apply(c);
  }

  view_parts& parts_;
  geometry g_;
  volume_geometry vg_;
  int subsets_;
  bool volumes_on_parts_;
  std::unique_ptr<detail::iterative_space> local_;  ///< the volumes, unless on the parts
  std::vector<std::int64_t> all_views_;
  std::vector<std::vector<std::int64_t>> subset_views_;
  std::unordered_set<const token*> tokens_;
  std::int64_t next_id_ = 1, made_ = 0, forward_calls_ = 0, back_calls_ = 0;
};

}  // namespace

volume reconstruct_partitioned(view_parts& parts, const geometry& g, const volume_geometry& vg,
                               const recon_options& opt) {
  CTFORGE_EXPECTS(is_iterative(opt.algo),
                  fmt::format("--algorithm {}: a run over view partitions is for the iterative "
                              "methods (FDK and FBP run in slab units)",
                              to_string(opt.algo)));
  CTFORGE_EXPECTS(!opt.reference, fmt::format("--reference: there is no reference path for {}",
                                              to_string(opt.algo)));
  detail::validate_iterative_options(g, vg, opt);
  auto space = std::make_unique<partitioned_space>(parts, g, vg, opt);
  partitioned_space* sp = space.get();
  detail::iterative_run run(
      std::move(space), [sp](space_buffer& b, int s, bool clamp) { sp->load(b, s, clamp); },
      parts.data_norm2(), vg, opt, detail::display_name(opt.algo));
  return detail::run_method(run);
}

}  // namespace ctforge
