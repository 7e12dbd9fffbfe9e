// ctforge recon: FDK / FBP and iterative (SIRT, OS-SART, CGLS, FISTA-TV, OSEM) reconstruction
// of a projection file.
#include "ctforge/recon.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "ctforge/checkpoint.hpp"
#include "cli.hpp"
#include "core/finite_scan.hpp"
#include "recon/iterative/iterative.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"

namespace ctforge::cli {
namespace {

struct recon_cli_options {
  std::string input;
  std::string output;
  std::string algorithm;  // empty: by beam kind
  grid_options grid;
  std::string filter = "ram-lak";
  double cutoff = 1.0;
  std::string displaced_detector = "auto";
  double offset_transition = k_default_offset_transition_px;
  std::string geometry;
  backend_cli_options gpu;
  int threads = 0;
  std::string preview;
  bool quiet = false;
  bool reference = false;
  // Foreign inputs and outputs (formats.hpp).
  std::string flat, dark;
  io::hdf5_scan_paths datasets;
  bool transpose = false, flip_u = false, flip_v = false;
  double pixel_size = 1;
  int bin = 1;
  input_options inputs;            // --data-path, --angles, --sinogram, --open-beam-cols
  std::string center_of_rotation;  // empty, a column, or "auto"
  double mu_water = io::default_mu_water_per_mm;
  // Iterative methods.
  int iterations = 50;
  double relaxation = 1.0;
  bool nonnegative = false;
  int subsets = 10;
  double tv_weight = 0;
  int tv_iterations = 20;
  std::string backprojector = "auto";
  double tolerance = 0;
  std::string initial;
  std::string log_iterations;
  // The options given on the command line, for "does not apply" errors: name -> option.
  std::vector<std::pair<std::string, CLI::Option*>> method_options;
  // Resumable runs.
  std::string checkpoint_dir;
  std::int64_t unit_planes = 0;
  int checkpoint_every = 0;
  double checkpoint_seconds = 30;
  std::string memory_limit;  // host memory for FDK / FBP data; empty: no limit
};

/// What a checkpointed run depends on, for its run record: a file by path, size and mtime.
nlohmann::json file_identity(const std::string& path) {
  if (path.empty()) return nullptr;
  std::error_code ec;
  const auto abs = std::filesystem::absolute(path, ec);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return abs.string();
  return {abs.string(), static_cast<std::int64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

/// Bytes an FDK / FBP unit holds at its peak: its band of views (and the filtered copy) and
/// its slab (and the copy handed on).
std::int64_t unit_bytes(const geometry& g, const volume_geometry& vg, const slab_unit& u) {
  return 2 * 4 * (g.view_count() * (u.r1 - u.r0) * g.cols + (u.k1 - u.k0) * vg.nx * vg.ny);
}

/// The most planes per unit (at most `planes`, 0: the default) whose units fit in `limit`
/// bytes; usage_error naming --memory-limit when not even one plane does.
std::int64_t planes_within(const geometry& g, const volume_geometry& vg, std::int64_t planes,
                           std::int64_t limit) {
  std::int64_t p = planes > 0 ? planes : default_unit_planes(vg);
  for (;;) {
    std::int64_t peak = 0;
    for (const auto& u : plan_slab_units(g, vg, p)) peak = std::max(peak, unit_bytes(g, vg, u));
    if (peak <= limit) return p;
    CTFORGE_EXPECTS(p > 1, fmt::format("--memory-limit: {} bytes do not hold one plane of the "
                                       "volume and the detector rows it needs ({} bytes)",
                                       limit, peak));
    p = std::max<std::int64_t>(1, p / 2);
  }
}

/// Whether the option `name` applies to algorithm `a` (the method-specific ones).
bool applies(const std::string& name, algorithm a) {
  if (name == "--subsets") return a == algorithm::os_sart || a == algorithm::osem;
  if (name == "--tv-weight" || name == "--tv-iterations") return a == algorithm::fista_tv;
  if (name == "--relaxation") return a == algorithm::sirt || a == algorithm::os_sart;
  if (name == "--nonnegative")  // OSEM: non-negative by construction, the flag changes nothing
    return is_iterative(a);      // CGLS: refused by reconstruct with the reason
  if (name == "--filter" || name == "--cutoff" || name == "--unit-planes" ||
      name == "--displaced-detector" || name == "--offset-transition")
    return !is_iterative(a);
  // --iterations, --backprojector, --tolerance, --initial, --log-iterations,
  // --checkpoint-every, --checkpoint-seconds:
  return is_iterative(a);
}

/// usage_error naming the first option given that does not apply to `a`, or that needs another
/// one (--checkpoint-every / --checkpoint-seconds / --unit-planes without --checkpoint-dir).
void refuse_inapplicable(const recon_cli_options& o, algorithm a) {
  for (const auto& [name, opt] : o.method_options) {
    if (opt->count() == 0) continue;
    if (!applies(name, a))
      throw usage_error(fmt::format("{}: does not apply to --algorithm {}", name, to_string(a)));
    const bool needs_dir = name == "--checkpoint-every" || name == "--checkpoint-seconds" ||
                           (name == "--unit-planes" && o.memory_limit.empty());
    if (needs_dir && o.checkpoint_dir.empty())
      throw usage_error(fmt::format("{}: needs --checkpoint-dir{}", name,
                                    name == "--unit-planes" ? " or --memory-limit" : ""));
  }
}

/// The warm start: any volume file the CLI reads, on exactly the reconstruction grid.
volume read_initial(const std::string& path, const volume_geometry& vg) {
  volume v;
  try {
    v = io::read_volume_any(path);
  } catch (const usage_error& e) {  // the option too, not only the file
    throw usage_error(fmt::format("--initial: {}", e.what()));
  } catch (const error& e) {
    throw error(fmt::format("--initial: {}", e.what()));
  }
  // NaN / infinity in the file: a runtime error naming it and the voxel (exit 1).
  if (const std::string bad = detail::first_non_finite_voxel(v.data.data(), v.geom);
      !bad.empty())
    throw error(fmt::format("--initial: {} holds a non-finite value {}", path, bad));
  const volume_geometry& h = v.geom;
  bool same = h.nx == vg.nx && h.ny == vg.ny && h.nz == vg.nz;
  for (int k = 0; k < 3 && same; ++k)
    same = std::abs(h.spacing_mm[k] - vg.spacing_mm[k]) <= 1e-4 * vg.spacing_mm[k] &&
           std::abs(h.origin_mm[k] - vg.origin_mm[k]) <= 1e-3 * vg.spacing_mm[k];
  CTFORGE_EXPECTS(
      same, fmt::format("--initial: {} is {} x {} x {} voxels of {:g} x {:g} x {:g} mm "
                        "from ({:g}, {:g}, {:g}) mm but the reconstruction grid is "
                        "{} x {} x {} of {:g} x {:g} x {:g} mm from ({:g}, {:g}, {:g}) "
                        "mm (set --size, --spacing and --origin to match)",
                        path, h.nx, h.ny, h.nz, h.spacing_mm[0], h.spacing_mm[1], h.spacing_mm[2],
                        h.origin_mm[0], h.origin_mm[1], h.origin_mm[2], vg.nx, vg.ny, vg.nz,
                        vg.spacing_mm[0], vg.spacing_mm[1], vg.spacing_mm[2], vg.origin_mm[0],
                        vg.origin_mm[1], vg.origin_mm[2]));
  return v;
}

/// The per-iteration log as CSV, written atomically.
void write_iteration_log(const std::string& path, const std::vector<iteration_info>& log) {
  std::string text = "iteration,residual,objective,relative_update,seconds,stop_criterion\n";
  for (const iteration_info& i : log)
    text += fmt::format("{},{:.9g},{:.9g},{:.9g},{:.6f},{:.9g}\n", i.iteration, i.residual,
                        i.objective, i.relative_update, i.seconds, i.stop_criterion);
  io::write_atomically(path, [&](const std::string& tmp) {
    io::write_file_bytes(tmp, text.data(), text.size(), "--log-iterations " + path);
  });
}

void run(const recon_cli_options& o) {
  const stopwatch total;
  recon_options ro;
  ro.filter = parse_filter(o.filter);
  CTFORGE_EXPECTS(
      std::isfinite(o.cutoff) && o.cutoff > 0 && o.cutoff <= 1,
      fmt::format("--cutoff: must be in (0, 1] (a fraction of Nyquist; got {})", o.cutoff));
  ro.cutoff = o.cutoff;
  ro.displaced_detector = parse_displaced_detector(o.displaced_detector);
  CTFORGE_EXPECTS(std::isfinite(o.offset_transition) && o.offset_transition >= 1,
                  fmt::format("--offset-transition: must be >= 1 (detector pixels; got {})",
                              o.offset_transition));
  ro.offset_transition_px = o.offset_transition;
  require_thread_count(o.threads);
  require_distinct_paths(
      {{"--output", o.output}, {"--preview", o.preview}, {"--log-iterations", o.log_iterations}},
      {{"input", o.input},
       {"--geometry", o.geometry},
       {"--flat", o.flat},
       {"--dark", o.dark},
       {"--angles", o.inputs.angles},
       {"--initial", o.initial}});
  ro.threads = o.threads;
  const backend_choice bc = parse_backend_options(o.gpu);
  ro.device = bc.device;
  ro.gpu_memory_limit_bytes = bc.gpu_memory_limit_bytes;
  ro.gpu_hardware_interpolation = bc.hardware_interpolation;
  ro.reference = o.reference;
  ro.where = bc.where;
  CTFORGE_EXPECTS(!(o.reference && ro.where == backend::cuda),
                  "--reference: the reference path runs on the CPU; drop --backend cuda");
  std::string notice;
  const backend where = o.reference ? backend::cpu : resolve_backend(ro.where, &notice, ro.device);
  CTFORGE_EXPECTS(!o.output.empty(), "--output: empty file name");
  if (io::volume_format_of(o.output) == io::volume_format::dicom) {  // a series directory
    require_output_directory("--output", o.output);
  } else {
    require_writable_dir("--output", o.output);
  }
  if (!o.preview.empty()) require_writable_dir("--preview", o.preview);
  if (!o.log_iterations.empty()) require_writable_dir("--log-iterations", o.log_iterations);

  const stopwatch t_read;
  // Any projection format (native, DataExchange, NXtomo, TIFF stack); --geometry describes
  // the whole stored scan and overrides the file's.
  require_positive("--pixel-size", o.pixel_size);
  require_positive("--mu-water", o.mu_water);
  CTFORGE_EXPECTS(o.bin >= 1, fmt::format("--bin: must be >= 1 (got {})", o.bin));
  io::projection_read_options read;
  read.flat_path = o.flat;
  read.transpose = o.transpose;
  read.flip_u = o.flip_u;
  read.flip_v = o.flip_v;
  read.dark_path = o.dark;
  read.datasets = o.datasets;
  read.geometry_path = o.geometry;
  read.pixel_size_mm = o.pixel_size;
  read.bin_rows = read.bin_cols = o.bin;
  apply_input_options(o.inputs, read);
  const std::int64_t memory_limit =
      o.memory_limit.empty() ? 0 : parse_byte_size("--memory-limit", o.memory_limit);
  // FDK / FBP with a checkpoint directory or a memory limit run slab by slab, each unit
  // reading only its detector rows from the file (the geometry is read first, alone).
  geometry g = io::read_projection_geometry(o.input, read);
  ro.algo = !o.algorithm.empty() ? parse_algorithm(o.algorithm) : default_algorithm(g);
  refuse_inapplicable(o, ro.algo);
  const bool analytic = !is_iterative(ro.algo);
  const volume_geometry vg_guess = make_grid(o.grid, g, /*whole_in_memory=*/memory_limit == 0);
  const std::int64_t whole_bytes =
      2 * 4 * (g.view_count() * g.rows * g.cols + vg_guess.voxel_count());
  const bool slabwise =
      analytic && (!o.checkpoint_dir.empty() || (memory_limit > 0 && whole_bytes > memory_limit));
  // Slab-wise runs into an HDF5 output never hold the volume whole.
  const bool streamed = slabwise && io::volume_format_of(o.output) == io::volume_format::hdf5;
  CTFORGE_EXPECTS(analytic || memory_limit == 0 || whole_bytes <= memory_limit,
                  fmt::format("--memory-limit: {} holds the projections and the volume whole "
                              "({} bytes); raise the limit or use fdk / fbp",
                              to_string(ro.algo), whole_bytes));
  io::loaded_projections in;
  if (slabwise && o.center_of_rotation != "auto" && !o.inputs.angles.empty()) {
    // No whole read below to carry the angle list's note (degrees that look like radians).
    const io::angle_list l = io::read_angle_list(o.inputs.angles, read.angles_in_radians);
    if (!l.warning.empty()) note(o.quiet, "note: " + l.warning);
  }
  if (!slabwise || o.center_of_rotation == "auto") {
    io::projection_read_options whole = read;
    if (slabwise) {  // the centre of rotation from 32 rows about the middle
      const std::int64_t mid = g.rows / 2, half = std::min<std::int64_t>(16, (g.rows + 1) / 2);
      whole = io::row_band_options(read, g.rows, std::max<std::int64_t>(0, mid - half),
                                   std::min(g.rows, mid + half));
    }
    in = io::read_projections_any(o.input, whole);
    if (!in.warnings.empty()) note(o.quiet, "note: " + in.warnings);
    if (!slabwise) g = *in.geom;
  }
  const projection_stack& proj = in.projections;
  if (o.center_of_rotation == "auto") {
    center_search_options so;
    so.threads = o.threads;
    const center_estimate e = find_center_of_rotation(proj, *in.geom, so);
    fmt::print(
        "center of rotation: column {:.2f} (estimated, confidence {:.2f}, {} method; "
        "detector middle {:.1f})\n",
        e.column, e.confidence, e.method, 0.5 * static_cast<double>(g.cols - 1));
    std::fflush(stdout);
    if (e.confidence < low_center_confidence)
      fmt::print(stderr,
                 "ctforge: warning: the estimated rotation centre {:.2f} has low confidence "
                 "({:.2f} < {}): check it with `ctforge center {} --range A:B:STEP -o "
                 "montage.png` and give the column to --center-of-rotation\n",
                 e.column, e.confidence, low_center_confidence, o.input);
    g = with_center_of_rotation(g, e.column);
  } else if (!o.center_of_rotation.empty()) {
    g = with_center_of_rotation(
        g, parse_doubles("--center-of-rotation", o.center_of_rotation, {1})[0]);
  }
  if (analytic && ro.displaced_detector == displaced_detector_mode::off &&
      detector_is_displaced(g))
    note(o.quiet, "warning: --displaced-detector off: this detector reaches further to one side "
                  "of the rotation axis than to the other; with the weights of a centred "
                  "detector its unmatched columns count half, so the ring of the object beyond "
                  "the narrow side is reconstructed wrong (truncation artefacts)");
  if (analytic) {
    // A displaced detector on a short scan: the ring beyond the overlap lacks data. Printed
    // even with --quiet, as the low-confidence centre is: the volume is wrong there.
    const std::string w = displaced_short_scan_warning(g, ro);
    if (!w.empty()) fmt::print(stderr, "ctforge: warning: {}\n", w);
  }
  ro.iterations = o.iterations;
  ro.relaxation = o.relaxation;
  ro.nonnegative = o.nonnegative;
  ro.subsets = o.subsets;
  // (The library clamps the count to the views; given on the command line, more is a mistake.)
  const bool subsets_given = std::any_of(o.method_options.begin(), o.method_options.end(),
                                         [](const auto& m) {
                                           return m.first == "--subsets" && m.second->count() > 0;
                                         });
  CTFORGE_EXPECTS(!subsets_given || o.subsets <= g.view_count(),
                  fmt::format("--subsets: {} subsets of {} views; at most one subset per view",
                              o.subsets, g.view_count()));
  ro.tv_weight = o.tv_weight;
  ro.tv_iterations = o.tv_iterations;
  ro.backprojector = parse_backprojector(o.backprojector);
  ro.tolerance = o.tolerance;
  const volume_geometry vg = make_grid(o.grid, g, /*whole_in_memory=*/!streamed);
  volume initial;
  if (!o.initial.empty()) {
    initial = read_initial(o.initial, vg);
    ro.initial = initial.data;
  }
  if (ro.algo == algorithm::osem && !o.quiet) {
    // OSEM models non-negative data and keeps a start's sign: say what it takes as 0.
    const auto negatives = [](std::span<const float> v) {
      std::int64_t n = 0;
      float low = 0;
      for (const float x : v)
        if (x < 0) {
          ++n;
          low = std::min(low, x);
        }
      return std::pair{n, low};
    };
    if (const auto [n, low] = negatives(proj.data); n > 0)
      note(false, fmt::format("note: OSEM takes the {} negative projection values (down to {:.3g};"
                              " noise) as 0",
                              n, low));
    if (const auto [n, low] = negatives(ro.initial); n > 0)
      note(false, fmt::format("note: OSEM starts the {} negative voxels of --initial (down to "
                              "{:.3g}) at 0, where its multiplicative update keeps them",
                              n, low));
  }
  const double s_read = t_read.seconds();

  if (!notice.empty() && ro.where == backend::automatic) note(o.quiet, "note: " + notice);
  if (ro.algo == algorithm::fista_tv)
    note(o.quiet, "note: FISTA-TV first estimates its step, |A|^2, by power iteration (up to 12 "
                  "forward and back-projections; a resumed run reuses the saved one)");
  if (where == backend::cuda && ro.gpu_hardware_interpolation && is_iterative(ro.algo) &&
      detail::backprojector_for(ro) == detail::backprojector_kind::matched)
    note(o.quiet, "note: --gpu-interpolation hardware: not with the matched back-projector, whose "
                  "transpose needs the exact samples; projecting exactly");
  const bool bar_on = !o.quiet;  // a bar on a terminal, else a line per tenth (progress_bar)
  const bool terminal = stderr_is_terminal();
  const std::string algo_name = to_string(ro.algo);
  const std::string where_name =
      where == backend::cuda ? "cuda" : (o.reference ? "cpu reference" : "cpu");
  progress_bar bar(fmt::format("{} ({}) {}x{}x{}", algo_name, where_name, vg.nx, vg.ny, vg.nz),
                   bar_on, terminal);
  if (bar_on) ro.progress = [&bar](double f) { bar.update(f); };
  // The per-iteration figures: for the log, and on the bar where they cost nothing (OS-SART and
  // OSEM pay one more forward projection per pass for them).
  std::vector<iteration_info> log;
  const bool figures_free = ro.algo != algorithm::os_sart && ro.algo != algorithm::osem;
  // (Not for the progress lines of a non-terminal: the figures cost a volume and a few passes.)
  if (is_iterative(ro.algo) &&
      (!o.log_iterations.empty() || (bar_on && figures_free && terminal)))
    ro.on_iteration = [&](const iteration_info& i) {
      log.push_back(i);
      bar.set_status(fmt::format("iteration {}, residual {:.4g}", i.iteration, i.residual));
    };
  const stopwatch t_recon;
  checkpoint_options co;
  co.dir = o.checkpoint_dir;
  co.planes_per_unit = o.unit_planes;
  CTFORGE_EXPECTS(o.checkpoint_every >= 0,
                  fmt::format("--checkpoint-every: must be >= 0 (got {})", o.checkpoint_every));
  require_non_negative("--checkpoint-seconds", o.checkpoint_seconds);
  CTFORGE_EXPECTS(o.unit_planes >= 0,
                  fmt::format("--unit-planes: must be >= 0 (got {})", o.unit_planes));
  co.every_iterations = o.checkpoint_every;
  co.every_seconds = o.checkpoint_seconds;
  volume vol;
  std::int64_t planes = o.unit_planes;
  if (slabwise && memory_limit > 0) {
    CTFORGE_EXPECTS(streamed, fmt::format("--memory-limit: the volume ({} bytes with the "
                                          "projections) is written slab by slab to .h5 outputs "
                                          "only; write {} as .h5 and convert it",
                                          whole_bytes, o.output));
    CTFORGE_EXPECTS(o.preview.empty(),
                    "--preview: needs the whole volume in memory; drop it with --memory-limit");
    planes = planes_within(g, vg, planes, memory_limit);
  }
  std::unique_ptr<io::volume_file_writer> writer;
  if (streamed) writer = std::make_unique<io::volume_file_writer>(o.output, vg);
  if (!slabwise && co.dir.empty()) {
    ro.memory_limit_bytes = memory_limit;  // FDK / FBP: their copies counted (0: the machine's)
    vol = reconstruct(proj, g, vg, ro);
  } else {
    nlohmann::json record = {
        {"input", file_identity(o.input)},
        {"flat", file_identity(o.flat)},
        {"dark", file_identity(o.dark)},
        {"geometry_file", file_identity(o.geometry)},
        {"geometry", nlohmann::json::parse(geometry_to_json(g))},
        {"bin", o.bin},
        {"orientation", {o.transpose, o.flip_u, o.flip_v}},
        {"grid", {{"size", {vg.nx, vg.ny, vg.nz}},
                  {"spacing_mm", vg.spacing_mm},
                  {"origin_mm", vg.origin_mm}}},
        {"algorithm", algo_name},
        {"filter", to_string(ro.filter)},
        {"cutoff", ro.cutoff},
        {"displaced_detector", to_string(ro.displaced_detector)},
        {"offset_transition_px", ro.offset_transition_px},
        {"backend", where_name},
        {"gpu_interpolation", ro.gpu_hardware_interpolation ? "hardware" : "exact"}};
    // The datasets named in the input (recorded only when named: older directories resume).
    const auto& ds = o.datasets;
    if (!ds.data.empty() || !ds.flats.empty() || !ds.darks.empty() || !ds.angles.empty())
      record["datasets"] = {ds.data, ds.flats, ds.darks, ds.angles};
    // SIGINT / SIGTERM stop the run at its next batch or iteration with what is complete
    // recorded (exit 130 / 143); a second signal ends it at once.
    const stop_on_signals stop(ro.cancel);
    const row_band_source rows = [&](std::int64_t r0, std::int64_t r1) {
      return io::read_projections_any(o.input, io::row_band_options(read, g.rows, r0, r1))
          .projections;
    };
    if (slabwise && !streamed) vol = volume(vg);
    const std::int64_t plane = vg.nx * vg.ny;
    const slab_sink sink = [&](const slab_unit& u, std::span<const float> data) {
      if (writer) {
        writer->write_planes(u.k0, data);
      } else {
        std::copy(data.begin(), data.end(), vol.data.begin() + u.k0 * plane);
      }
    };
    const auto print_note = [&](const std::string& t) { note(o.quiet, t); };
    try {
      if (slabwise) {
        reconstruct_slabwise(rows, g, vg, ro, planes, co, co.dir.empty() ? "{}" : record.dump(),
                             sink, print_note);
      } else {  // SIRT: its iterate saved in co.dir
        vol = reconstruct_resumable(proj, g, vg, ro, co, record.dump(), print_note);
      }
    } catch (const cancelled& e) {
      if (stop.signal() == 0) throw;
      // The figures of the iterations done (a resumed run writes the whole run's).
      if (!o.log_iterations.empty() && !log.empty()) write_iteration_log(o.log_iterations, log);
      const auto* kept = dynamic_cast<const checkpoint_stopped*>(&e);
      throw stopped(stop.signal(),
                    kept ? fmt::format("stopped by {}: {}; run the same command again to finish",
                                       stop.signal() == SIGTERM ? "SIGTERM" : "SIGINT",
                                       kept->recorded)
                         : fmt::format("stopped by {}; nothing was written",
                                       stop.signal() == SIGTERM ? "SIGTERM" : "SIGINT"));
    }
  }
  const double s_recon = t_recon.seconds();
  bar.done();
  if (where == backend::cuda && !is_iterative(ro.algo)) {
    const std::string how = describe_last_gpu_call(gpu_call::reconstruction);
    if (!how.empty()) note(o.quiet, how);
  }

  // "N iterations", or "K of N iterations (tolerance reached)" when the tolerance stopped it.
  const bool early = is_iterative(ro.algo) && !log.empty() && log.back().iteration < ro.iterations;
  const std::string count =
      early ? fmt::format("{} of {}", log.back().iteration, ro.iterations)
            : fmt::format("{}", ro.iterations);
  const std::string stopped_early = early ? " (tolerance reached)" : "";
  std::string method;
  switch (ro.algo) {
    case algorithm::sirt:
    case algorithm::os_sart:
      method = fmt::format(
          "{} iterations{}, relaxation {:g}{}{}", count, stopped_early, ro.relaxation,
          ro.algo == algorithm::os_sart ? fmt::format(", {} subsets", ro.subsets) : "",
          ro.nonnegative ? ", non-negative" : "");
      break;
    case algorithm::cgls:
      method = fmt::format("{} iterations{}", count, stopped_early);
      break;
    case algorithm::fista_tv:
      method = fmt::format("{} iterations{}, TV weight {:g}{}", count, stopped_early,
                           ro.tv_weight, ro.nonnegative ? ", non-negative" : "");
      break;
    case algorithm::osem:
      method = fmt::format("{} iterations{}, {} subsets", count, stopped_early, ro.subsets);
      break;
    default:
      method = fmt::format("filter {} cutoff {:g}", to_string(ro.filter), ro.cutoff);
  }
  if (!o.log_iterations.empty()) write_iteration_log(o.log_iterations, log);
  const stopwatch t_write;
  io::volume_write_options wo;
  wo.mu_water_per_mm = o.mu_water;
  wo.series_description = "ctforge " + algo_name + " reconstruction";
  if (writer) {
    writer->commit();
  } else {
    io::write_volume_any(o.output, vol, wo);
  }
  if (!o.preview.empty()) {
    if (writer) vol = io::read_volume(o.output);  // --checkpoint-dir without --memory-limit
    io::write_preview_png(o.preview, vol);
  }
  if (!co.dir.empty()) remove_checkpoint(co);  // the output holds them now
  note(o.quiet,
       fmt::format("recon: wrote {}{} ({} x {} x {} voxels of {:g} x {:g} x {:g} mm; {} {} "
                   "{}): read {:.2f} s, reconstruct {:.2f} s, write {:.2f} s, total {:.2f} s",
                   o.output, o.preview.empty() ? "" : " and " + o.preview, vg.nx, vg.ny, vg.nz,
                   vg.spacing_mm[0], vg.spacing_mm[1], vg.spacing_mm[2], algo_name, where_name,
                   method, s_read, s_recon, t_write.seconds(), total.seconds()));
}

}  // namespace

runner add_recon(CLI::App& app) {
  auto o = std::make_shared<recon_cli_options>();
  CLI::App* sub =
      app.add_subcommand("recon",
                         "Reconstruct a volume from a projection file (FDK / FBP, or iterative: "
                         "SIRT, OS-SART, CGLS, FISTA-TV, OSEM)");
  sub->add_option("input", o->input,
                  "Projections: ctforge / DataExchange / NXtomo HDF5, or a TIFF stack (directory, "
                  "glob in quotes, multi-page .tif)")
      ->required()
      ->type_name("PROJ.h5");
  sub->add_option("-o,--output", o->output,
                  "Output volume: .h5, .mha/.mhd, .nrrd, .nii/.nii.gz, or a DICOM series directory")
      ->required()
      ->type_name("FILE")
      ->check(non_empty_path());
  sub->add_option("--algorithm", o->algorithm,
                  "fdk: cone / fan beam, circular orbit (complete, well-sampled scans); "
                  "fbp: parallel beam, circular orbit; "
                  "sirt: any geometry, robust, slow to converge; "
                  "os-sart: SIRT per ordered subset of views, fast first iterations; "
                  "cgls: least squares by conjugate gradients, fastest on consistent data; "
                  "fista-tv: least squares plus total variation, for sparse-view, "
                  "limited-angle and noisy (low-dose) scans of piecewise-constant objects "
                  "(needs --tv-weight); "
                  "osem: Poisson likelihood, low-count data, non-negative. "
                  "Default: fdk or fbp when the orbit is circular (vector geometries included), "
                  "sirt otherwise")
      ->type_name("NAME");
  const auto method_option = [&](const std::string& name, CLI::Option* opt) {
    o->method_options.emplace_back(name, opt);
    return opt;
  };
  method_option("--iterations",
                sub->add_option("--iterations", o->iterations,
                                "Iterative methods: iterations (OS-SART / OSEM: passes over all "
                                "subsets), >= 1"))
      ->type_name("N")
      ->capture_default_str();
  method_option("--relaxation", sub->add_option("--relaxation", o->relaxation,
                                                "SIRT / OS-SART: step length, in (0, 2)"))
      ->type_name("L")
      ->capture_default_str();
  method_option("--nonnegative",
                sub->add_flag("--nonnegative", o->nonnegative,
                              "SIRT / OS-SART: clamp the volume at 0 after every update; "
                              "FISTA-TV: non-negativity in the TV step; OSEM: always "
                              "non-negative (CGLS refuses it)"));
  method_option("--subsets",
                sub->add_option("--subsets", o->subsets,
                                "OS-SART / OSEM: ordered subsets of views (>= 1, at most the "
                                "view count)"))
      ->type_name("N")
      ->capture_default_str();
  method_option("--tv-weight",
                sub->add_option("--tv-weight", o->tv_weight,
                                "FISTA-TV (required): weight of the total variation, in units of "
                                "the volume's values (typically 1e-4 to 1e-3 of the object's "
                                "peak value; larger smooths more)"))
      ->type_name("W");
  method_option("--tv-iterations",
                sub->add_option("--tv-iterations", o->tv_iterations,
                                "FISTA-TV: inner steps of the TV prox per iteration"))
      ->type_name("N")
      ->capture_default_str();
  method_option("--backprojector",
                sub->add_option("--backprojector", o->backprojector,
                                "Iterative methods: voxel (voxel-driven, default for SIRT / "
                                "OS-SART) or matched (the exact transpose of the forward "
                                "projector, default for the others; CGLS and FISTA-TV need it)"))
      ->type_name("NAME");
  method_option("--tolerance",
                sub->add_option("--tolerance", o->tolerance,
                                "Iterative methods: stop when the relative update |x_k+1 - x_k| / "
                                "|x_k+1| falls below T (CGLS: the relative gradient |A^T r| / "
                                "|A^T p|); 0 = run every iteration"))
      ->type_name("T")
      ->capture_default_str();
  method_option("--initial",
                sub->add_option("--initial", o->initial,
                                "Iterative methods: start from this volume (any volume format; its "
                                "grid must be the reconstruction grid), e.g. an FDK result"))
      ->type_name("VOL");
  method_option("--log-iterations",
                sub->add_option("--log-iterations", o->log_iterations,
                                "Iterative methods: write iteration,residual,objective,"
                                "relative_update,seconds,stop_criterion per iteration as CSV "
                                "(residual: |Ax - p| / |p|; stop_criterion: what --tolerance "
                                "compares)"))
      ->type_name("FILE.csv")
      ->check(non_empty_path());
  add_grid_options(sub, o->grid);
  method_option("--filter", sub->add_option("--filter", o->filter,
                                            "FDK / FBP: ramp filter window: ram-lak, "
                                            "shepp-logan, cosine, hamming or hann"))
      ->type_name("NAME")
      ->capture_default_str();
  method_option("--cutoff", sub->add_option("--cutoff", o->cutoff,
                                            "FDK / FBP: filter cut-off as a fraction of "
                                            "Nyquist, in (0, 1]"))
      ->type_name("F")
      ->capture_default_str();
  method_option("--displaced-detector",
                sub->add_option("--displaced-detector", o->displaced_detector,
                                "FDK / FBP: weighting of a displaced (half-fan) detector: auto "
                                "(when the detector reaches more than a pixel further to one "
                                "side of the rotation axis than to the other), on (always) or "
                                "off (the 1/2 weights of a centred detector: truncates the ring "
                                "beyond the narrow side; warns). A displaced detector on a short "
                                "scan (under 360 deg) measures the lines beyond the overlap's "
                                "radius only in part: it reconstructs, and warns on stderr with "
                                "that radius and the fraction measured"))
      ->type_name("auto|on|off")
      ->capture_default_str();
  method_option("--offset-transition",
                sub->add_option("--offset-transition", o->offset_transition,
                                "FDK / FBP, displaced detector: width (detector pixels, >= 1) "
                                "of the smooth ramps at the ends of the overlap both sides "
                                "cover; between them a line's two measurements weigh 1/2 each, "
                                "as on a centred detector (least noise). The default 16 keeps "
                                "the ramp's slope under pi/64 per pixel, smooth for the ramp "
                                "filter, while only 2 x 16 columns weigh other than 1/2; "
                                "clamped to the overlap's width, which gives Wang's ramp "
                                "across the whole overlap (the noisier weighting of before)"))
      ->type_name("PIXELS")
      ->capture_default_str();
  sub->add_option("--geometry", o->geometry,
                  "Geometry JSON file (whole stored scan) to use instead of the file's; required "
                  "for TIFF stacks")
      ->type_name("FILE");
  sub->add_flag("--transpose", o->transpose,
                "Projections: swap detector rows and columns (before --flip-u / --flip-v)");
  sub->add_flag("--flip-u", o->flip_u, "Projections: reverse the detector columns");
  sub->add_flag("--flip-v", o->flip_v,
                "Projections: reverse the detector rows (files that store the top row first)");
  sub->add_option("--flat", o->flat, "Flat-field TIFF image(s) (file, directory or glob)")
      ->type_name("PATH");
  add_dataset_options(sub, o->datasets);
  sub->add_option("--dark", o->dark, "Dark-field TIFF image(s) (file, directory or glob)")
      ->type_name("PATH");
  add_input_options(sub, o->inputs);
  sub->add_option("--pixel-size", o->pixel_size,
                  "Detector pixel pitch (mm) where the file does not record it (DataExchange, "
                  "--angles)")
      ->type_name("MM")
      ->capture_default_str();
  sub->add_option("--bin", o->bin, "Average N x N detector pixels before reconstructing")
      ->type_name("N")
      ->capture_default_str();
  sub->add_option("--center-of-rotation", o->center_of_rotation,
                  "Detector column (0-based) the rotation axis projects to, or auto to estimate "
                  "it from opposite views (printed)")
      ->type_name("COL|auto");
  sub->add_option("--mu-water", o->mu_water,
                  "DICOM output: HU = 1000 (mu - mu_water) / mu_water, mu_water in 1/mm")
      ->type_name("MU")
      ->capture_default_str();
  add_backend_options(sub, o->gpu, "a small value forces the volume to be split into z-slabs");
  sub->add_option("--threads", o->threads, "CPU threads (0 = all cores)")
      ->type_name("N")
      ->capture_default_str();
  sub->add_option("--preview", o->preview,
                  "Also write a PNG of the three central slices (axial, coronal, sagittal)")
      ->type_name("FILE.png")
      ->check(non_empty_path());
  sub->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "Resumable run: FDK / FBP slab by slab, each slab recorded in DIR as it "
                  "completes; the iterative methods with their state saved there. The same "
                  "command resumes an interrupted run (SIGINT / SIGTERM stop it at the next "
                  "batch or iteration, exit 130 / 143); the directory's files are removed once "
                  "the output is written")
      ->type_name("DIR")
      ->check(non_empty_path());
  method_option("--checkpoint-every",
                sub->add_option("--checkpoint-every", o->checkpoint_every,
                                "--checkpoint-dir, iterative methods: save their state every N "
                                "iterations (0: by time only)"))
      ->type_name("N");
  method_option("--checkpoint-seconds",
                sub->add_option("--checkpoint-seconds", o->checkpoint_seconds,
                                "--checkpoint-dir, iterative methods: save their state when T "
                                "seconds have passed since the last save (0: by count only)"))
      ->type_name("T")
      ->capture_default_str();
  method_option("--unit-planes",
                sub->add_option("--unit-planes", o->unit_planes,
                                "--checkpoint-dir or --memory-limit, FDK / FBP: z-planes per unit "
                                "(default: about 16 M voxels per unit)"))
      ->type_name("N");
  sub->add_option("--memory-limit", o->memory_limit,
                  "FDK / FBP: host memory for projections and volume (e.g. 8G). A larger job "
                  "runs slab by slab, each slab reading only its detector rows from the input "
                  "and written straight into the .h5 output")
      ->type_name("SIZE");
  sub->add_flag("--quiet", o->quiet, "Print nothing but errors");
  sub->add_flag("--reference", o->reference,
                "Use the slow double-precision CPU reference path (for validation)");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
