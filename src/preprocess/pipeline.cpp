// The preprocessing steps together: their option table, the options parsed from it, the steps
// applied in order and the rows a band needs (include/ctforge/preprocess.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <system_error>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "preprocess/steps.hpp"

namespace ctforge {
namespace {

constexpr std::array k_options{
    preprocess_option{"zingers", "--zingers", "T", "", "",
                      "Zinger removal (hot pixels, cosmic rays): every value at least T above "
                      "the median of its neighbourhood is replaced by that median (tomopy's "
                      "remove_outlier rule), after normalisation, so T is in line-integral "
                      "units; every other value stays bit-identical"},
    preprocess_option{"zinger_size", "--zinger-size", "N", "zingers", "",
                      "Zinger removal: the neighbourhood is N x N pixels (rows x columns) of the "
                      "view, odd, 3 to 99 (default 3)"},
    preprocess_option{"zinger_views", "--zinger-views", "N", "zingers", "",
                      "Zinger removal: ... times N neighbouring views centred on the pixel's, "
                      "odd, 1 to 99 (default 1: within the view)"},
    preprocess_option{"rings", "--rings", "METHOD", "", "",
                      "Ring removal on every detector row's sinogram, Vo et al., Opt. Express "
                      "26, 28396 (2018): sorting (small and partial stripes), filtering, large "
                      "(large stripes), dead (unresponsive columns, then large) or all (dead, "
                      "large, then sorting: remove_all_stripe); or fourier_wavelet / fw (Muench "
                      "et al., Opt. Express 17, 8567, 2009) or titarenko / ti (Titarenko 2010), "
                      "as tomopy's remove_stripe_fw and remove_stripe_ti"},
    preprocess_option{"ring_size", "--ring-size", "N", "rings", "sorting filtering all",
                      "Ring removal: median window across detector columns, odd, 3 to 999 "
                      "(default 21)"},
    preprocess_option{"ring_sigma", "--ring-sigma", "S", "rings", "filtering fourier_wavelet",
                      "Ring removal: sigma of the Gaussian window along the views (filtering, "
                      "default 3) or of the damping in Fourier samples (fourier_wavelet, "
                      "default 2), > 0"},
    preprocess_option{"ring_la_size", "--ring-la-size", "N", "rings", "large dead all",
                      "Ring removal: median window for large stripes, odd, 3 to 999 "
                      "(default 51)"},
    preprocess_option{"ring_snr", "--ring-snr", "R", "rings", "large dead all",
                      "Ring removal: detection ratio over the noise level, > 0 (default 3)"},
    preprocess_option{"ring_drop_ratio", "--ring-drop-ratio", "F", "rings", "large all",
                      "Ring removal: fraction of the sorted values left out when comparing a "
                      "column with its neighbours, in [0, 0.8] (default 0.1)"},
    preprocess_option{"ring_level", "--ring-level", "N", "rings", "fourier_wavelet",
                      "Ring removal: wavelet levels, 1 to 30 (default 0: ceil(log2 of the "
                      "larger of views and columns))"},
    preprocess_option{"ring_wavelet", "--ring-wavelet", "NAME", "rings", "fourier_wavelet",
                      "Ring removal: the wavelet, haar or db1 ... db10 (default db5)"},
    preprocess_option{"ring_alpha", "--ring-alpha", "A", "rings", "titarenko",
                      "Ring removal: damping factor of the combination, >= 0 (default 1.5)"},
    preprocess_option{"ring_blocks", "--ring-blocks", "N", "rings", "titarenko",
                      "Ring removal: blocks of views corrected apart, 0 to the view count "
                      "(default 0: one)"},
    preprocess_option{"phase", "--phase", "METHOD", "", "",
                      "Phase retrieval of every view (propagation-based phase contrast, one "
                      "material): paganin (Paganin et al., J. Microsc. 206, 33, 2002) or "
                      "generalized (Paganin et al. 2020); needs --phase-energy, "
                      "--phase-distance and --delta-beta; the pitch is the detector's (cone "
                      "beams: pitch and distance divided by the magnification). Its output is "
                      "the attenuation line integral mu t"},
    preprocess_option{"phase_energy", "--phase-energy", "KEV", "phase", "",
                      "Phase retrieval: photon energy, keV"},
    preprocess_option{"phase_distance", "--phase-distance", "MM", "phase", "",
                      "Phase retrieval: sample-to-detector (propagation) distance, mm"},
    preprocess_option{"delta_beta", "--delta-beta", "R", "phase", "",
                      "Phase retrieval: delta / beta of the material (e.g. a few hundred for "
                      "soft tissue at 20-30 keV)"},
    preprocess_option{"beam_hardening", "--beam-hardening", "C0,C1,...", "", "",
                      "Beam-hardening correction: every line integral p becomes c0 + c1 p + "
                      "c2 p^2 + ... (RTK's water precorrection convention; coefficients from "
                      "ctforge.fit_linearisation or ctforge.fit_water_precorrection)"},
};

const preprocess_option* find_option(std::string_view spelling) {
  for (const preprocess_option& o : k_options)
    if (spelling == o.name || spelling == o.flag) return &o;
  return nullptr;
}

/// `entry`'s name or flag, as the caller spelled `spelling` (flags start with "--").
std::string_view spelled_like(std::string_view spelling, const preprocess_option& entry) {
  return spelling.starts_with("--") ? entry.flag : entry.name;
}

double number(const preprocess_setting& s) {
  double v = 0;
  const char* end = s.value.data() + s.value.size();
  const auto [ptr, ec] = std::from_chars(s.value.data(), end, v);
  CTFORGE_EXPECTS(ec == std::errc{} && ptr == end && std::isfinite(v),
                  fmt::format("{}: expected a number (got '{}')", s.spelling, s.value));
  return v;
}

double positive(const preprocess_setting& s) {
  const double v = number(s);
  CTFORGE_EXPECTS(v > 0, fmt::format("{}: must be positive (got {})", s.spelling, s.value));
  return v;
}

int odd_window(const preprocess_setting& s, int low, int high, const char* what) {
  int v = 0;
  const char* end = s.value.data() + s.value.size();
  const auto [ptr, ec] = std::from_chars(s.value.data(), end, v);
  CTFORGE_EXPECTS(ec == std::errc{} && ptr == end && v >= low && v <= high && v % 2 == 1,
                  fmt::format("{}: an odd window of {} to {} {} (got '{}')", s.spelling, low, high,
                              what, s.value));
  return v;
}

int integer(const preprocess_setting& s, int low, int high) {
  int v = 0;
  const char* end = s.value.data() + s.value.size();
  const auto [ptr, ec] = std::from_chars(s.value.data(), end, v);
  CTFORGE_EXPECTS(
      ec == std::errc{} && ptr == end && v >= low && v <= high,
      fmt::format("{}: an integer from {} to {} (got '{}')", s.spelling, low, high, s.value));
  return v;
}

/// "haar", "db1" ... "db10".
std::string wavelet_name(const preprocess_setting& s) {
  bool known = s.value == "haar";
  for (int n = 1; n <= 10 && !known; ++n) known = s.value == fmt::format("db{}", n);
  CTFORGE_EXPECTS(known, fmt::format("{}: unknown wavelet '{}' (expected haar or db1 ... db10)",
                                     s.spelling, s.value));
  return s.value;
}

/// "c0,c1,...": at least one finite number.
std::vector<double> coefficients(const preprocess_setting& s) {
  std::vector<double> out;
  std::string_view rest = s.value;
  while (true) {
    const std::size_t comma = rest.find(',');
    out.push_back(number({s.spelling, std::string(rest.substr(0, comma))}));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

/// Sets the step-switching option `s` (zingers, rings, phase, beam_hardening) in `o`.
void set_step(preprocess_options& o, const preprocess_option& e, const preprocess_setting& s) {
  if (e.name == "zingers") {
    o.zingers.emplace().threshold = positive(s);
  } else if (e.name == "rings") {
    o.rings.emplace().method = parse_stripe_method(s.value, s.spelling);
  } else if (e.name == "phase") {
    CTFORGE_EXPECTS(s.value == "paganin" || s.value == "generalized",
                    fmt::format("{}: unknown method '{}' (expected paganin or generalized)",
                                s.spelling, s.value));
    o.phase.emplace().method = parse_phase_method(s.value);
  } else {
    o.beam_hardening = coefficients(s);
  }
}

bool step_on(const preprocess_options& o, std::string_view step) {
  if (step == "zingers") return o.zingers.has_value();
  if (step == "rings") return o.rings.has_value();
  if (step == "phase") return o.phase.has_value();
  return o.beam_hardening.has_value();
}

/// Sets the step option `s` in `o`, whose step is on.
void set_detail(preprocess_options& o, const preprocess_option& e, const preprocess_setting& s) {
  if (e.name == "zinger_size") o.zingers->size = odd_window(s, 3, 99, "pixels");
  if (e.name == "zinger_views") o.zingers->views = odd_window(s, 1, 99, "views");
  if (e.name == "ring_size") o.rings->size = odd_window(s, 3, 999, "columns");
  if (e.name == "ring_sigma")
    (o.rings->method == stripe_method::fourier_wavelet ? o.rings->fw_sigma : o.rings->sigma) =
        positive(s);
  if (e.name == "ring_level") o.rings->level = integer(s, 0, 30);
  if (e.name == "ring_wavelet") o.rings->wname = wavelet_name(s);
  if (e.name == "ring_alpha") {
    o.rings->alpha = number(s);
    CTFORGE_EXPECTS(o.rings->alpha >= 0,
                    fmt::format("{}: must be >= 0 (got {})", s.spelling, s.value));
  }
  if (e.name == "ring_blocks") o.rings->nblock = integer(s, 0, 1 << 30);
  if (e.name == "ring_la_size") o.rings->la_size = odd_window(s, 3, 999, "columns");
  if (e.name == "ring_snr") o.rings->snr = positive(s);
  if (e.name == "phase_energy") o.phase->energy_kev = positive(s);
  if (e.name == "phase_distance") o.phase->distance_mm = positive(s);
  if (e.name == "delta_beta") o.phase->delta_beta = positive(s);
  if (e.name == "ring_drop_ratio") {
    o.rings->drop_ratio = number(s);
    CTFORGE_EXPECTS(o.rings->drop_ratio >= 0 && o.rings->drop_ratio <= 0.8,
                    fmt::format("{}: must be in [0, 0.8] (got {})", s.spelling, s.value));
  }
}

/// Whether the stripe option `e` applies to `method`.
bool applies(const preprocess_option& e, stripe_method method) {
  if (e.methods.empty()) return true;
  const std::string name = to_string(method);
  std::string_view rest = e.methods;
  while (!rest.empty()) {
    const std::size_t space = rest.find(' ');
    if (rest.substr(0, space) == name) return true;
    rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
  }
  return false;
}

/// The step option `s` (entry `e`) is given with its step on and applying to its method.
void require_step(const preprocess_options& o, const preprocess_option& e,
                  const preprocess_setting& s) {
  const preprocess_option& step = *find_option(e.step);
  CTFORGE_EXPECTS(step_on(o, e.step),
                  fmt::format("{}: needs {}", s.spelling, spelled_like(s.spelling, step)));
  if (e.step != "rings" || applies(e, o.rings->method)) return;
  std::string methods(e.methods);
  std::replace(methods.begin(), methods.end(), ' ', '/');
  throw usage_error(fmt::format("{}: applies to {} {} only (got {})", s.spelling,
                                spelled_like(s.spelling, step), methods,
                                to_string(o.rings->method)));
}

std::string text(double v) {
  return fmt::format("{}", v);
}

/// Phase retrieval's options in the sample's plane (set_detector's pitch and magnification).
phase_options in_sample_plane(const preprocess_options& o) {
  phase_options ph = *o.phase;
  CTFORGE_EXPECTS(ph.pixel_u_mm > 0 && ph.pixel_v_mm > 0 && o.magnification > 0,
                  "phase retrieval: the detector pitch is not set (set_detector)");
  ph.pixel_u_mm /= o.magnification;
  ph.pixel_v_mm /= o.magnification;
  ph.pixel_size_mm = ph.pixel_u_mm;
  ph.distance_mm /= o.magnification;
  ph.threads = o.threads;
  return ph;
}

/// Phase retrieval has no defaults for its physics: each value must be given, named as the
/// caller spells options.
void require_phase_values(const phase_options& p, std::span<const preprocess_setting> given) {
  const bool flags = !given.empty() && given.front().spelling.starts_with("--");
  std::string missing;
  const std::pair<const char*, double> values[] = {{"phase_energy", p.energy_kev},
                                                   {"phase_distance", p.distance_mm},
                                                   {"delta_beta", p.delta_beta}};
  for (const auto& [name, v] : values)
    if (v <= 0) {
      const preprocess_option& e = *find_option(name);
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", flags ? e.flag : e.name);
    }
  const preprocess_option& step = *find_option("phase");
  CTFORGE_EXPECTS(missing.empty(),
                  fmt::format("{}: needs {}", flags ? step.flag : step.name, missing));
}

}  // namespace

std::span<const preprocess_option> preprocess_option_table() {
  return k_options;
}

preprocess_options parse_preprocess_options(std::span<const preprocess_setting> given) {
  std::vector<const preprocess_option*> entries;
  for (const preprocess_setting& s : given) {
    const preprocess_option* e = find_option(s.spelling);
    CTFORGE_EXPECTS(e != nullptr, fmt::format("{}: not a preprocessing option", s.spelling));
    CTFORGE_EXPECTS(std::find(entries.begin(), entries.end(), e) == entries.end(),
                    fmt::format("{}: given twice", s.spelling));
    entries.push_back(e);
  }
  preprocess_options o;
  for (std::size_t i = 0; i < given.size(); ++i)  // the steps first: the others need them
    if (entries[i]->step.empty()) set_step(o, *entries[i], given[i]);
  for (std::size_t i = 0; i < given.size(); ++i) {
    if (entries[i]->step.empty()) continue;
    require_step(o, *entries[i], given[i]);
    set_detail(o, *entries[i], given[i]);
  }
  if (o.phase) require_phase_values(*o.phase, given);
  return o;
}

std::vector<preprocess_setting> preprocess_settings(const preprocess_options& o) {
  std::vector<preprocess_setting> out;
  if (o.zingers) {
    out.push_back({"zingers", text(o.zingers->threshold)});
    out.push_back({"zinger_size", text(o.zingers->size)});
    out.push_back({"zinger_views", text(o.zingers->views)});
  }
  if (o.rings) {
    const stripe_options& r = *o.rings;
    out.push_back({"rings", to_string(r.method)});
    const double sigma = r.method == stripe_method::fourier_wavelet ? r.fw_sigma : r.sigma;
    const std::array<std::pair<const char*, std::string>, 9> values{
        {{"ring_size", text(r.size)},
         {"ring_sigma", text(sigma)},
         {"ring_la_size", text(r.la_size)},
         {"ring_snr", text(r.snr)},
         {"ring_drop_ratio", text(r.drop_ratio)},
         {"ring_level", text(r.level)},
         {"ring_wavelet", r.wname},
         {"ring_alpha", text(r.alpha)},
         {"ring_blocks", text(r.nblock)}}};
    for (const auto& [name, v] : values)
      if (applies(*find_option(name), r.method)) out.push_back({name, v});
  }
  if (o.phase) {
    out.push_back({"phase", to_string(o.phase->method)});
    out.push_back({"phase_energy", text(o.phase->energy_kev)});
    out.push_back({"phase_distance", text(o.phase->distance_mm)});
    out.push_back({"delta_beta", text(o.phase->delta_beta)});
  }
  if (o.beam_hardening) {
    std::string list;
    for (const double c : *o.beam_hardening) list += (list.empty() ? "" : ",") + text(c);
    out.push_back({"beam_hardening", list});
  }
  return out;
}

void set_detector(preprocess_options& opt, const geometry& g) {
  if (!opt.phase) return;
  opt.phase->pixel_u_mm = g.pixel_u_mm;
  opt.phase->pixel_v_mm = g.pixel_v_mm;
  opt.phase->pixel_size_mm = g.pixel_u_mm;
  opt.magnification = 1;  // a point source: Fresnel scaling by the magnification
  if (g.beam == beam_kind::cone && g.orbit && g.orbit->source_to_isocenter_mm > 0)
    opt.magnification = g.orbit->source_to_detector_mm / g.orbit->source_to_isocenter_mm;
}

namespace detail {

phase_options phase_in_sample_plane(const preprocess_options& o) {
  return in_sample_plane(o);
}

preprocess_report preprocess_cpu(projections_ref p, const preprocess_options& opt) {
  preprocess_report report;
  if (opt.zingers) {
    outlier_options z = *opt.zingers;
    z.threads = opt.threads;
    report.zingers_replaced = remove_outliers(p, z);
  }
  if (opt.rings) {
    stripe_options r = *opt.rings;
    r.threads = opt.threads;
    remove_stripes(p, r);
  }
  if (opt.phase) retrieve_phase(p, in_sample_plane(opt));
  if (opt.beam_hardening) correct_beam_hardening(p, *opt.beam_hardening, opt.threads);
  return report;
}

}  // namespace detail

std::int64_t preprocess_row_margin(const preprocess_options& opt) {
  // Zingers: the window's rows about the pixel; rings and beam hardening: each row alone;
  // phase retrieval: its kernel's reach, on rows the zinger step has cleaned.
  std::int64_t m = opt.zingers ? opt.zingers->size / 2 : 0;
  if (opt.phase) m += phase_row_margin(in_sample_plane(opt), k_phase_band_tolerance);
  return m;
}

}  // namespace ctforge
