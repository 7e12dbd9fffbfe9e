// The table of algorithm-specific reconstruction options (include/ctforge/options.hpp).
#include "ctforge/options.hpp"

#include <fmt/format.h>

#include <array>

#include "ctforge/error.hpp"

namespace ctforge {
namespace {

using enum option_scope;

constexpr std::array k_options{
    recon_option{"iterations", "--iterations", iterative, "",
                 "Iterative methods: iterations (OS-SART / OSEM: passes over all subsets), >= 1"},
    recon_option{"relaxation", "--relaxation", relaxed, "",
                 "SIRT / OS-SART: step length, in (0, 2)"},
    recon_option{"nonnegative", "--nonnegative", iterative, "",
                 "SIRT / OS-SART: clamp the volume at 0 after every update; FISTA-TV: "
                 "non-negativity in the TV step; OSEM: always non-negative (CGLS refuses it)"},
    recon_option{"subsets", "--subsets", ordered_subsets, "",
                 "OS-SART / OSEM: ordered subsets of views (>= 1, at most the view count)"},
    recon_option{"tv_weight", "--tv-weight", fista_tv, "",
                 "FISTA-TV (required): weight of the total variation, in units of the volume's "
                 "values (typically 1e-4 to 1e-3 of the object's peak value; larger smooths "
                 "more)"},
    recon_option{"tv_iterations", "--tv-iterations", fista_tv, "",
                 "FISTA-TV: inner steps of the TV prox per iteration"},
    recon_option{"backprojector", "--backprojector", iterative, "",
                 "Iterative methods: voxel (voxel-driven, default for SIRT / OS-SART) or "
                 "matched (the exact transpose of the forward projector, default for the "
                 "others; CGLS and FISTA-TV need it)"},
    recon_option{"tolerance", "--tolerance", iterative, "",
                 "Iterative methods: stop when the relative update |x_k+1 - x_k| / |x_k+1| "
                 "falls below T (CGLS: the relative gradient |A^T r| / |A^T p|); 0 = run every "
                 "iteration"},
    recon_option{"initial", "--initial", iterative, "",
                 "Iterative methods: start from this volume (any volume format; its grid must "
                 "be the reconstruction grid), e.g. an FDK result"},
    recon_option{"return_log", "--log-iterations", iterative, "",
                 "Iterative methods: write iteration,residual,objective,relative_update,seconds,"
                 "stop_criterion per iteration as CSV (residual: |Ax - p| / |p|; "
                 "stop_criterion: what --tolerance compares)"},
    recon_option{"filter", "--filter", analytic, "",
                 "FDK / FBP / helical FBP: ramp filter window: ram-lak, shepp-logan, cosine, "
                 "hamming or hann"},
    recon_option{"cutoff", "--cutoff", analytic, "",
                 "FDK / FBP / helical FBP: filter cut-off as a fraction of Nyquist, in (0, 1]"},
    recon_option{"displaced_detector", "--displaced-detector", circular, "",
                 "FDK / FBP: weighting of a displaced (half-fan) detector: auto (when the "
                 "detector reaches more than a pixel further to one side of the rotation axis "
                 "than to the other), on (always) or off (the 1/2 weights of a centred detector: "
                 "truncates the ring beyond the narrow side; warns). A displaced detector on a "
                 "short scan (under 360 deg) measures the lines beyond the overlap's radius only "
                 "in part: it reconstructs, and warns on stderr with that radius and the "
                 "fraction measured"},
    recon_option{"offset_transition", "--offset-transition", circular, "",
                 "FDK / FBP, displaced detector: width (detector pixels, >= 1) of the smooth "
                 "ramps at the ends of the overlap both sides cover; between them a line's two "
                 "measurements weigh 1/2 each, as on a centred detector (least noise). The "
                 "default 16 keeps the ramp's slope under pi/64 per pixel, smooth for the ramp "
                 "filter, while only 2 x 16 columns weigh other than 1/2; clamped to the "
                 "overlap's width, which gives Wang's ramp across the whole overlap (the noisier "
                 "weighting of before)"},
    recon_option{"helical_q", "--helical-q", helical, "",
                 "Helical FBP: share Q of the detector's height, in [0, 1), where a ray weighs "
                 "fully; towards the edge its weight falls to 0 as cos^2, and each ray's weight "
                 "is divided by the sum over its conjugate rays (Stierstorfer's WFBP window). "
                 "Larger Q: less noise; smaller Q: fewer cone-beam artefacts at high pitch"},
    recon_option{"checkpoint_every", "--checkpoint-every", iterative, "checkpoint_dir",
                 "--checkpoint-dir, iterative methods: save their state every N iterations "
                 "(0: by time only)"},
    recon_option{"checkpoint_seconds", "--checkpoint-seconds", iterative, "checkpoint_dir",
                 "--checkpoint-dir, iterative methods: save their state when T seconds have "
                 "passed since the last save (0: by count only)"},
    recon_option{
        "unit_planes", "--unit-planes", analytic, "checkpoint_dir",
        "--checkpoint-dir or --memory-limit, FDK / FBP / helical FBP: z-planes per unit (default: "
        "about 16 M voxels per unit)"},
};

}  // namespace

std::span<const recon_option> recon_option_table() {
  return k_options;
}

const recon_option* find_recon_option(std::string_view name_or_flag) {
  for (const recon_option& o : k_options)
    if (o.name == name_or_flag || o.flag == name_or_flag) return &o;
  return nullptr;
}

bool applies(option_scope scope, algorithm a) {
  switch (scope) {
    case analytic:
      return !is_iterative(a);
    case circular:
      return a == algorithm::fdk || a == algorithm::fbp;
    case helical:
      return a == algorithm::helical_fbp;
    case iterative:
      return is_iterative(a);
    case relaxed:
      return a == algorithm::sirt || a == algorithm::os_sart;
    case ordered_subsets:
      return a == algorithm::os_sart || a == algorithm::osem;
    case fista_tv:
      return a == algorithm::fista_tv;
  }
  return false;
}

bool option_applies(std::string_view name_or_flag, algorithm a) {
  const recon_option* o = find_recon_option(name_or_flag);
  CTFORGE_EXPECTS(o != nullptr, fmt::format("{}: not an algorithm-specific reconstruction "
                                            "option",
                                            name_or_flag));
  return applies(o->scope, a);
}

std::string algorithms_of(option_scope scope) {
  std::string out;
  for (algorithm a : {algorithm::fdk, algorithm::fbp, algorithm::helical_fbp, algorithm::sirt,
                      algorithm::os_sart, algorithm::cgls, algorithm::fista_tv, algorithm::osem})
    if (applies(scope, a)) out += (out.empty() ? "" : ", ") + to_string(a);
  return out;
}

void require_option_applies(std::string_view name_or_flag, algorithm a, std::string_view spelling) {
  if (option_applies(name_or_flag, a)) return;
  const recon_option& o = *find_recon_option(name_or_flag);
  const bool cli = spelling.starts_with("--");
  throw usage_error(fmt::format("{}: does not apply to {} {} (only to {})", spelling,
                                cli ? "--algorithm" : "algorithm", to_string(a),
                                algorithms_of(o.scope)));
}

}  // namespace ctforge
