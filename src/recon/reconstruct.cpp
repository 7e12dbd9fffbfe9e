// ctforge::reconstruct: validation, backend selection and dispatch to FDK / FBP
// (src/recon/fdk.cpp on the CPU, src/kernels on CUDA) and the iterative methods
// (src/recon/iterative/), and the option parsers of include/ctforge/recon.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>

#include "core/enum_names.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "recon/fdk.hpp"
#include "recon/fdk_geometry.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/helical.hpp"
#include "recon/iterative/iterative.hpp"

namespace ctforge {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

algorithm parse_algorithm(std::string_view name) {
  std::string n = lower(name);
  std::replace(n.begin(), n.end(), '_', '-');
  if (n == "fdk") return algorithm::fdk;
  if (n == "fbp") return algorithm::fbp;
  if (n == "sirt") return algorithm::sirt;
  if (n == "cgls") return algorithm::cgls;
  if (n == "os-sart") return algorithm::os_sart;
  if (n == "fista-tv") return algorithm::fista_tv;
  if (n == "osem") return algorithm::osem;
  if (n == "helical-fbp") return algorithm::helical_fbp;
  throw usage_error(fmt::format(
      "--algorithm: unknown algorithm '{}' (expected fdk, fbp, helical-fbp, sirt, os-sart, cgls, "
      "fista-tv or osem)",
      name));
}

constexpr detail::enum_name<algorithm> k_algorithm_names[] = {
    {algorithm::fdk, "fdk"},         {algorithm::fbp, "fbp"},
    {algorithm::sirt, "sirt"},       {algorithm::cgls, "cgls"},
    {algorithm::os_sart, "os-sart"}, {algorithm::fista_tv, "fista-tv"},
    {algorithm::osem, "osem"},       {algorithm::helical_fbp, "helical-fbp"}};

std::string to_string(algorithm a) {
  return detail::name_of(a, k_algorithm_names, "fdk");
}

backprojector parse_backprojector(std::string_view name) {
  const std::string n = lower(name);
  if (n == "auto" || n == "automatic") return backprojector::automatic;
  if (n == "voxel") return backprojector::voxel;
  if (n == "matched") return backprojector::matched;
  throw usage_error(fmt::format(
      "--backprojector: unknown back-projector '{}' (expected voxel or matched)", name));
}

constexpr detail::enum_name<backprojector> k_backprojector_names[] = {
    {backprojector::automatic, "auto"},
    {backprojector::voxel, "voxel"},
    {backprojector::matched, "matched"}};

std::string to_string(backprojector b) {
  return detail::name_of(b, k_backprojector_names, "auto");
}

filter_window parse_filter(std::string_view name) {
  std::string n = lower(name);
  std::replace(n.begin(), n.end(), '_', '-');
  if (n == "ram-lak" || n == "ramlak" || n == "ramp") return filter_window::ram_lak;
  if (n == "shepp-logan") return filter_window::shepp_logan;
  if (n == "cosine") return filter_window::cosine;
  if (n == "hamming") return filter_window::hamming;
  if (n == "hann" || n == "hanning") return filter_window::hann;
  throw usage_error(fmt::format(
      "--filter: unknown filter '{}' (expected ram-lak, shepp-logan, cosine, hamming or hann)",
      name));
}

displaced_detector_mode parse_displaced_detector(std::string_view name) {
  const std::string n = lower(name);
  if (n == "auto" || n == "automatic") return displaced_detector_mode::automatic;
  if (n == "on") return displaced_detector_mode::on;
  if (n == "off") return displaced_detector_mode::off;
  throw usage_error(
      fmt::format("--displaced-detector: unknown mode '{}' (expected auto, on or off)", name));
}

constexpr detail::enum_name<displaced_detector_mode> k_displaced_names[] = {
    {displaced_detector_mode::automatic, "auto"},
    {displaced_detector_mode::on, "on"},
    {displaced_detector_mode::off, "off"}};

std::string to_string(displaced_detector_mode m) {
  return detail::name_of(m, k_displaced_names, "auto");
}

bool detector_is_displaced(const geometry& g) {
  try {
    g.validate();
    if (!g.orbit) return detector_is_displaced(detail::make_circular_equivalent(g, "").geom);
    return std::abs(detail::mean_detector_asymmetry_mm(g)) > std::abs(g.pixel_u_mm);
  } catch (const usage_error&) {
    return false;  // not a circular orbit: no FDK / FBP
  }
}

std::string displaced_short_scan_warning(const geometry& g, const recon_options& opt) {
  if (is_iterative(opt.algo)) return {};
  try {
    g.validate();
    if (g.orbit) return detail::displaced_short_scan_warning(g, opt);
    const char* name = opt.algo == algorithm::fdk ? "fdk" : "fbp";
    const detail::circular_equivalent eq = detail::make_circular_equivalent(g, name);
    recon_options used = opt;  // the transition is in the real detector's pixels
    used.offset_transition_px *= eq.oversample;
    return detail::displaced_short_scan_warning(eq.geom, used);
  } catch (const usage_error&) {
    return {};  // reconstruct refuses this input with its own message
  }
}

constexpr detail::enum_name<filter_window> k_filter_names[] = {
    {filter_window::ram_lak, "ram-lak"},
    {filter_window::shepp_logan, "shepp-logan"},
    {filter_window::cosine, "cosine"},
    {filter_window::hamming, "hamming"},
    {filter_window::hann, "hann"}};

std::string to_string(filter_window w) {
  return detail::name_of(w, k_filter_names, "ram-lak");
}

algorithm default_algorithm(const geometry& g) {
  if (g.helix) return algorithm::helical_fbp;
  const algorithm analytic = g.beam == beam_kind::cone ? algorithm::fdk : algorithm::fbp;
  if (g.orbit) return analytic;
  try {
    (void)detail::make_circular_equivalent(g, "");
    return analytic;
  } catch (const usage_error&) {
    return algorithm::sirt;
  }
}

namespace {

/// Host bytes FDK / FBP hold: the caller's projections, their resampled and padded copies, the
/// volume and the reference path's working copy of the projections it filters.
struct host_memory {
  std::int64_t input = 0, resampled = 0, padded = 0, volume = 0, reference_copy = 0;
  /// Padding reads the resampled copy, which is released once the padded one exists; the
  /// volume is allocated after that.
  std::int64_t peak() const {
    const std::int64_t filtered = padded > 0 ? padded : resampled;
    return input + std::max(resampled + padded, filtered + volume + reference_copy);
  }
};

/// The host memory of FDK / FBP on `proj` (host data unless on the device), reconstructed on
/// the circular geometry `circ` (resampled onto its detector when `resamples`), before
/// anything is allocated. A displaced detector's padding is bounded by the columns that make
/// the narrow side of its most displaced view reach as far as the wide side
/// (detail::narrow_side_padding_for: 2 |offset| / pixel), known before the setup.
host_memory host_memory_of(const projection_view& proj, const geometry& circ, bool resamples,
                           const volume_geometry& vg, const recon_options& opt,
                           const device_array* device_out) {
  constexpr std::int64_t k_float = sizeof(float);
  host_memory m;
  m.input = proj.space == memory_space::cuda_device ? 0 : proj.size() * k_float;
  m.volume = device_out ? 0 : vg.voxel_count() * k_float;
  const std::int64_t views = circ.view_count(), rows = circ.rows, cols = circ.cols;
  if (resamples) m.resampled = views * rows * cols * k_float;
  std::int64_t pad = 0;
  if (opt.displaced_detector != displaced_detector_mode::off && circ.orbit &&
      circ.pixel_u_mm != 0) {
    double worst = 0;
    for (const double off : circ.orbit->offset_u_mm) worst = std::max(worst, std::abs(2 * off));
    pad = static_cast<std::int64_t>(std::ceil(worst / std::abs(circ.pixel_u_mm) - 1e-6));
  }
  if (pad > 0) m.padded = views * rows * (cols + pad) * k_float;
  if (opt.reference) m.reference_copy = m.padded > 0 ? m.padded : views * rows * cols * k_float;
  return m;
}

/// usage_error naming the sizes when `m` exceeds `limit` (0: this machine's physical memory).
void require_host_memory(const host_memory& m, std::int64_t limit, const char* name) {
  const std::int64_t peak = m.peak();
  const std::int64_t cap = limit > 0
                               ? limit
                               : static_cast<std::int64_t>(std::min<std::uint64_t>(
                                     detail::physical_memory_bytes(), std::uint64_t{INT64_MAX}));
  if (peak <= cap) return;
  std::string parts = fmt::format("the projections ({} bytes)", m.input);
  if (m.resampled > 0) parts += fmt::format(", their resampled copy ({} bytes)", m.resampled);
  if (m.padded > 0) parts += fmt::format(", their padded copy ({} bytes)", m.padded);
  if (m.reference_copy > 0)
    parts += fmt::format(", the reference path's copy ({} bytes)", m.reference_copy);
  parts += fmt::format(" and the volume ({} bytes)", m.volume);
  const double gib = 1 << 30;
  throw usage_error(fmt::format(
      "{}: {} need {} bytes ({:.1f} GiB) at the peak, more than {} ({} bytes, {:.1f} GiB); "
      "use a smaller grid, or reconstruct slab by slab (ctforge recon --memory-limit with an "
      ".h5 output)",
      name, parts, peak, static_cast<double>(peak) / gib,
      limit > 0 ? "the memory limit" : "the memory of this machine", cap,
      static_cast<double>(cap) / gib));
}

/// reconstruct, or (device_out) reconstruct_to_device.
volume reconstruct_impl(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, device_array* device_out) {
  vg.validate();
  detail::require_thread_count(opt.threads);
  // Data in GPU memory is never read on the host: only the CUDA FDK / FBP pipeline takes it.
  const bool on_device = proj.space == memory_space::cuda_device;
  if (on_device || device_out) {
    const char* what = on_device ? "projections in GPU memory" : "a volume kept in GPU memory";
    CTFORGE_EXPECTS(!is_iterative(opt.algo), std::string(what) + " need --algorithm fdk or fbp (" +
                                                 to_string(opt.algo) + " runs on the host)");
    CTFORGE_EXPECTS(!opt.reference, std::string(what) + " need the CUDA backend, not --reference");
    CTFORGE_EXPECTS(opt.where != backend::cpu,
                    std::string(what) + " need the CUDA backend, not --backend cpu");
    CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                    "projection data size does not match its dimensions");
    if (resolve_backend(opt.where, nullptr, opt.device) != backend::cuda)
      throw error(std::string(what) + ": no usable CUDA device");
  }
  if (opt.algo == algorithm::helical_fbp) {
    CTFORGE_EXPECTS(!on_device && !device_out,
                    "helical-fbp: reads and returns host memory (GPU-resident input and output: "
                    "fdk or fbp)");
    return detail::helical_reconstruct(proj, g, vg, opt);
  }
  CTFORGE_EXPECTS(!g.helix || is_iterative(opt.algo),
                  fmt::format("{}: needs a circular orbit; the geometry is 'helical' (use "
                              "--algorithm helical-fbp, or an iterative method)",
                              to_string(opt.algo)));
  if (is_iterative(opt.algo)) {
    detail::validate_iterative(proj, g, vg, opt);
    CTFORGE_EXPECTS(!opt.reference, fmt::format("--reference: there is no reference path for {}",
                                                to_string(opt.algo)));
    const backend where = resolve_backend(opt.where, nullptr, opt.device);
    detail::check_finite_values(proj, opt.threads);
    return detail::iterative_reconstruct(proj, g, vg, opt, where);
  }
  // Vector geometries with a circular orbit are rewritten as circular ones on virtual
  // detectors (recon/fdk_geometry.hpp); their projections are resampled when those differ from
  // the real detectors. Everything below sees a circular geometry.
  std::optional<detail::circular_equivalent> eq;
  std::optional<projection_stack> resampled;
  if (!g.orbit) {
    const char* name = opt.algo == algorithm::fdk ? "fdk" : "fbp";
    CTFORGE_EXPECTS((opt.algo == algorithm::fdk) == (g.beam == beam_kind::cone),
                    fmt::format("{}: needs a {} geometry, got '{}' (use --algorithm {})", name,
                                opt.algo == algorithm::fdk ? "cone-beam" : "parallel-beam",
                                g.type_name(), opt.algo == algorithm::fdk ? "fbp" : "fdk"));
    CTFORGE_EXPECTS(
        proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols &&
            static_cast<std::int64_t>(proj.data.size()) == proj.size(),
        fmt::format("{}: projections are {}x{}x{} (views x rows x cols) but the geometry "
                    "describes {}x{}x{}",
                    name, proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
    eq = detail::make_circular_equivalent(g, name);
    CTFORGE_EXPECTS(!(on_device && eq->needs_resampling),
                    "projections in GPU memory: this vector geometry's detectors need resampling "
                    "on the host; pass host projections");
    require_host_memory(host_memory_of(proj, eq->geom, eq->needs_resampling, vg, opt, device_out),
                        opt.memory_limit_bytes, name);
    if (eq->needs_resampling) {
      detail::check_finite_values(proj, opt.threads);  // before interpolation spreads a NaN
      resampled = detail::resample(*eq, proj, opt.threads);
    }
  }
  const geometry* geo = eq ? &eq->geom : &g;
  projection_view data = resampled ? projection_view(*resampled) : proj;
  // At half the column pitch the filter's Nyquist doubles: keep the cut-off where the real
  // detector's is.
  const recon_options opt_used = eq ? detail::options_on_virtual_detector(*eq, opt) : opt;
  // Validation first (usage errors before device errors); the scan for non-finite values is
  // left to the backend: the CPU scans here, the GPU while pre-weighting.
  detail::fdk_setup setup = detail::make_fdk_setup(data, *geo, opt_used, /*check_values=*/false);
  if (!eq)  // (vector geometries: checked above, before resampling)
    require_host_memory(host_memory_of(proj, g, false, vg, opt, device_out), opt.memory_limit_bytes,
                        opt.algo == algorithm::fdk ? "fdk" : "fbp");
  // A displaced detector gets zero columns on its narrow side (see narrow_side_padding), with
  // the weights of the unpadded detector.
  bool checked = resampled.has_value();
  if (!checked && !on_device && detail::narrow_side_padding_for(setup, *geo).columns > 0) {
    detail::check_finite_values(data, opt.threads);  // before the copy
    checked = true;
  }
  std::optional<detail::padded_fdk_input> padded =
      detail::pad_for_displaced_detector(data, *geo, setup, opt_used);
  if (padded) {
    setup = std::move(padded->setup);
    geo = &padded->geo;
    data = padded->proj;
    resampled.reset();  // read by the padding only
  }
  // The reference path is a CPU path by definition.
  const backend where =
      opt.reference ? backend::cpu : resolve_backend(opt.where, nullptr, opt.device);
  if (where != backend::cuda && !checked) detail::check_finite_values(data, opt.threads);
  if (where == backend::cuda) {
#if defined(CTFORGE_WITH_CUDA)
    detail::cuda_options copt;
    static_cast<execution_context&>(copt) = opt;
    return detail::cuda_reconstruct(data, *geo, vg, opt_used, copt, &setup, device_out);
#endif
  }
  return detail::fdk_reconstruct_cpu(data, *geo, vg, opt_used, setup);
}

}  // namespace

volume reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                   const recon_options& opt) {
  return reconstruct_impl(proj, g, vg, opt, nullptr);
}

device_array reconstruct_to_device(const projection_view& proj, const geometry& g,
                                   const volume_geometry& vg, const recon_options& opt) {
  device_array out;
  (void)reconstruct_impl(proj, g, vg, opt, &out);
  CTFORGE_CHECK(!out.empty() || vg.voxel_count() == 0,
                "reconstruct_to_device: the CUDA pipeline returned no device volume");
  return out;
}

}  // namespace ctforge
