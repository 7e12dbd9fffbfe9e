// ctforge recon: FDK / FBP and iterative (SIRT, OS-SART, CGLS, FISTA-TV, OSEM) reconstruction
// of a projection file.
#include "ctforge/recon.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>

#include "cli.hpp"
#include "core/finite_scan.hpp"
#include "ctforge/checkpoint.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "ctforge/options.hpp"
#include "recon/iterative/iterative.hpp"

namespace ctforge::cli {
namespace {

struct recon_cli_options {
  std::string input;
  volume_output_options out;  // -o / --output, --preview, --mu-water
  std::string algorithm;      // empty: by beam kind
  grid_options grid;
  projection_input_options read;
  execution_options exec;
  checkpoint_cli_options checkpoint;  // --checkpoint-dir, --unit-share, --memory-limit
  preprocess_cli_options prep;        // --zingers, --rings, ...
  std::string center_of_rotation;     // empty, a column, or "auto"
  bool quiet = false;
  bool reference = false;
  // The algorithm-specific options (recon_option_table(); bound to these fields by field_of).
  std::string filter = "ram-lak";
  double cutoff = 1.0;
  std::string displaced_detector = "auto";
  double offset_transition = k_default_offset_transition_px;
  double helical_q = 0.7;
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
  std::int64_t unit_planes = 0;
  int checkpoint_every = 0;
  double checkpoint_seconds = 30;
  // The table's options as registered, in the table's order, for "does not apply" errors.
  std::vector<std::pair<const recon_option*, CLI::Option*>> method_options;

  /// Whether the table's option `name` was given on the command line.
  bool given(std::string_view name) const {
    for (const auto& [entry, opt] : method_options)
      if (entry->name == name) return opt->count() > 0;
    return false;
  }
};

/// Where the value of a table entry goes, and how `--help` names it.
struct option_field {
  std::variant<int*, std::int64_t*, double*, bool*, std::string*> value;
  const char* type_name = "";  // "" for flags
  bool show_default = false;
  bool is_path = false;  // an output file: '' refused
};

/// The field of `o` that the table's option `name` fills; an entry the command line does not
/// bind is a programming error (every `ctforge` run fails until it is bound).
option_field field_of(recon_cli_options& o, std::string_view name) {
  if (name == "iterations") return {&o.iterations, "N", true};
  if (name == "relaxation") return {&o.relaxation, "L", true};
  if (name == "nonnegative") return {&o.nonnegative};
  if (name == "subsets") return {&o.subsets, "N", true};
  if (name == "tv_weight") return {&o.tv_weight, "W"};
  if (name == "tv_iterations") return {&o.tv_iterations, "N", true};
  if (name == "backprojector") return {&o.backprojector, "NAME"};
  if (name == "tolerance") return {&o.tolerance, "T", true};
  if (name == "initial") return {&o.initial, "VOL"};
  if (name == "return_log") return {&o.log_iterations, "FILE.csv", false, true};
  if (name == "filter") return {&o.filter, "NAME", true};
  if (name == "cutoff") return {&o.cutoff, "F", true};
  if (name == "displaced_detector") return {&o.displaced_detector, "auto|on|off", true};
  if (name == "offset_transition") return {&o.offset_transition, "PIXELS", true};
  if (name == "helical_q") return {&o.helical_q, "Q", true};
  if (name == "checkpoint_every") return {&o.checkpoint_every, "N"};
  if (name == "checkpoint_seconds") return {&o.checkpoint_seconds, "T", true};
  if (name == "unit_planes") return {&o.unit_planes, "N"};
  CTFORGE_FAIL(
      fmt::format("ctforge recon: the option {} of the recon option table has no "
                  "field on the command line",
                  name));
}

/// The heading under which `--help` lists the table's options that need no other option.
constexpr const char* k_method_group = "Method";

/// Registers every option of recon_option_table() with its flag and help text: those that
/// need --checkpoint-dir in the checkpoint group, the others in the method group.
void add_method_options(CLI::App* method, CLI::App* checkpoint, recon_cli_options& o) {
  for (const recon_option& entry : recon_option_table()) {
    const option_field f = field_of(o, entry.name);
    CLI::App* group = entry.needs.empty() ? method : checkpoint;
    const std::string flag(entry.flag), help(entry.help);
    CLI::Option* opt = std::visit(
        [&](auto* field) -> CLI::Option* {
          if constexpr (std::is_same_v<decltype(field), bool*>)
            return group->add_flag(flag, *field, help);
          else
            return group->add_option(flag, *field, help)->type_name(f.type_name);
        },
        f.value);
    if (f.show_default) opt->capture_default_str();
    if (entry.name == std::string_view("initial")) opt->transform(object_input(flag));
    if (f.is_path) opt->check(non_empty_path())->transform(object_output(flag));
    o.method_options.emplace_back(&entry, opt);
  }
}

/// Whether the option `needs` names (a field of recon_options' name, "checkpoint_dir") was
/// given.
bool needed_option_given(const recon_cli_options& o, std::string_view needs) {
  if (needs == "checkpoint_dir") return !o.checkpoint.dir.empty();
  CTFORGE_FAIL(fmt::format("ctforge recon: unknown option {} named as needed", needs));
}

/// usage_error naming the first option given that does not apply to `a` (and where it
/// applies), or that needs another one (--checkpoint-every / --checkpoint-seconds /
/// --unit-planes without --checkpoint-dir; the FDK / FBP ones take --memory-limit instead).
void refuse_inapplicable(const recon_cli_options& o, algorithm a) {
  for (const auto& [entry, opt] : o.method_options) {
    if (opt->count() == 0) continue;
    require_option_applies(entry->name, a, entry->flag);
    if (entry->needs.empty() || needed_option_given(o, entry->needs)) continue;
    std::string needed = "--" + std::string(entry->needs);
    std::replace(needed.begin(), needed.end(), '_', '-');
    // --memory-limit runs FDK / FBP slab by slab too.
    const bool slabs = entry->scope == option_scope::analytic;
    if (slabs && !o.checkpoint.memory_limit.empty()) continue;
    throw usage_error(
        fmt::format("{}: needs {}{}", entry->flag, needed, slabs ? " or --memory-limit" : ""));
  }
}

/// What a checkpointed run depends on, for its run record: a file by path, size and mtime; an
/// s3:// object (staged or read in place) by URL, size and ETag.
nlohmann::json file_identity(const std::string& path) {
  if (path.empty()) return nullptr;
  if (const auto o = object_identity(path)) return {o->url, o->size, o->etag};
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
  return 2 * 4 * ((u.v1 - u.v0) * (u.r1 - u.r0) * g.cols + (u.k1 - u.k0) * vg.nx * vg.ny);
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
                                       "volume and the detector rows and views it needs ({} bytes)",
                                       limit, peak));
    p = std::max<std::int64_t>(1, p / 2);
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
  if (const std::string bad = detail::first_non_finite_voxel(v.data.data(), v.geom); !bad.empty())
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

/// What the steps of one run share.
struct recon_run {
  explicit recon_run(const recon_cli_options& options) : o(options) {}
  const recon_cli_options& o;
  recon_options ro;
  backend where = backend::cpu;  // where it runs (resolved)
  std::string notice;            // resolve_backend's, for --backend auto
  io::projection_read_options read;
  preprocess_options prep;        // the cleaning steps after normalisation
  std::int64_t memory_limit = 0;  // --memory-limit in bytes; 0: none
  geometry g;
  bool analytic = true;
  bool slabwise = false;         // FDK / FBP unit by unit (--checkpoint-dir, --memory-limit)
  bool streamed = false;         // slab-wise into an .h5 or .zarr output, never holding it whole
  std::int64_t whole_bytes = 0;  // projections and volume held whole
  io::loaded_projections in;
  volume_geometry vg;
  volume initial;
  std::vector<iteration_info> log;
  checkpoint_options co;
  std::optional<unit_share> share;  // --unit-share
  share_status share_done;          // what the share left recorded
  bool written_before = false;      // the share found the output assembled from this run
  nlohmann::json assembled;         // what DIR/assembled.json says once the output is written
  volume vol;
  std::unique_ptr<io::plane_writer> writer;
  std::string algo_name, where_name;
};

/// The options that need no input: the FDK / FBP settings and the execution context, checked
/// (the backend as asked).
recon_options options_of(const recon_cli_options& o) {
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
  CTFORGE_EXPECTS(std::isfinite(o.helical_q) && o.helical_q >= 0 && o.helical_q < 1,
                  fmt::format("--helical-q: must be in [0, 1) (got {})", o.helical_q));
  ro.helical_q = o.helical_q;
  static_cast<execution_context&>(ro) = parse_execution_options(o.exec);
  ro.reference = o.reference;
  CTFORGE_EXPECTS(!(o.reference && ro.where == backend::cuda),
                  "--reference: the reference path runs on the CPU; drop --backend cuda");
  return ro;
}

/// No output may be an input or another output.
void require_distinct_files(const recon_cli_options& o) {
  std::vector<named_path> inputs = projection_input_paths(o.read);
  inputs.insert(inputs.begin(), {"input", o.input});
  inputs.push_back({"--initial", o.initial});
  require_distinct_paths({{"--output", o.out.output},
                          {"--preview", o.out.preview},
                          {"--log-iterations", o.log_iterations}},
                         inputs);
}

/// The outputs' directories exist and the names name files (a DICOM series: a directory).
void require_output_places(const recon_cli_options& o) {
  CTFORGE_EXPECTS(!o.out.output.empty(), "--output: empty file name");
  const io::volume_format f = io::volume_format_of(o.out.output);
  if (f == io::volume_format::dicom || f == io::volume_format::zarr) {  // a directory
    require_output_directory("--output", o.out.output);
  } else {
    require_writable_dir("--output", o.out.output);
  }
  if (!o.out.preview.empty()) require_writable_dir("--preview", o.out.preview);
  if (!o.log_iterations.empty()) require_writable_dir("--log-iterations", o.log_iterations);
}

/// --unit-share K/N, checked: only with --checkpoint-dir, and only for the methods of slab units.
unit_share unit_share_of(const recon_cli_options& o, algorithm a) {
  const std::string& text = o.checkpoint.unit_share;
  unit_share s;
  const auto slash = text.find('/');
  const auto whole = [&](std::size_t from, std::size_t to, std::int64_t& v) {
    const char* end = text.data() + to;
    const auto [p, ec] = std::from_chars(text.data() + from, end, v);
    return ec == std::errc() && p == end && from < to;
  };
  CTFORGE_EXPECTS(
      slash != std::string::npos && whole(0, slash, s.index) &&
          whole(slash + 1, text.size(), s.count) && 0 <= s.index && s.index < s.count,
      fmt::format("--unit-share: expected K/N, integers with 0 <= K < N (got '{}')", text));
  CTFORGE_EXPECTS(!o.checkpoint.dir.empty(),
                  "--unit-share: needs --checkpoint-dir (a directory every share sees, where "
                  "the units are recorded)");
  CTFORGE_EXPECTS(!is_iterative(a),
                  fmt::format("--unit-share: does not apply to --algorithm {} (only to fdk, fbp, "
                              "helical-fbp, whose slab units the shares divide)",
                              to_string(a)));
  return s;
}

/// The read options, the geometry (read first, alone), the algorithm and how the run holds
/// its data: FDK / FBP with a checkpoint directory or a memory limit run slab by slab, each
/// unit reading only its detector rows from the file.
void plan_input(recon_run& r) {
  const recon_cli_options& o = r.o;
  // Any projection format (native, DataExchange, NXtomo, TIFF stack); --geometry describes
  // the whole stored scan and overrides the file's.
  r.read = projection_read_options_of(o.read);
  r.prep = preprocess_options_of(o.prep, r.ro);
  require_positive("--mu-water", o.out.mu_water);
  r.memory_limit = o.checkpoint.memory_limit.empty()
                       ? 0
                       : parse_byte_size("--memory-limit", o.checkpoint.memory_limit);
  r.g = io::read_projection_geometry(o.input, r.read);
  set_detector(r.prep, r.g);
  r.ro.algo = !o.algorithm.empty() ? parse_algorithm(o.algorithm) : default_algorithm(r.g);
  refuse_inapplicable(o, r.ro.algo);
  if (!o.checkpoint.unit_share.empty()) r.share = unit_share_of(o, r.ro.algo);
  r.analytic = !is_iterative(r.ro.algo);
  const volume_geometry vg_guess = make_grid(o.grid, r.g, /*whole_in_memory=*/r.memory_limit == 0);
  r.whole_bytes = 2 * 4 * (r.g.view_count() * r.g.rows * r.g.cols + vg_guess.voxel_count());
  r.slabwise = r.analytic && (!o.checkpoint.dir.empty() ||
                              (r.memory_limit > 0 && r.whole_bytes > r.memory_limit));
  const io::volume_format out_format = io::volume_format_of(o.out.output);
  r.streamed = r.slabwise && (out_format == io::volume_format::hdf5 ||
                              out_format == io::volume_format::zarr);
  CTFORGE_EXPECTS(r.analytic || r.memory_limit == 0 || r.whole_bytes <= r.memory_limit,
                  fmt::format("--memory-limit: {} holds the projections and the volume whole "
                              "({} bytes); raise the limit or use fdk / fbp",
                              to_string(r.ro.algo), r.whole_bytes));
}

/// The preprocessing steps on the projections read whole (a slab-wise run cleans each unit's
/// band as it reads it, and the rows its centre is estimated from here).
void clean_input(recon_run& r) {
  if (r.prep.empty()) return;
  const preprocess_report done = preprocess(r.in.projections, r.prep);
  if (r.prep.zingers && !r.slabwise)
    note(r.o.quiet,
         fmt::format("note: zingers: {} values replaced ({:.3g}%)", done.zingers_replaced,
                     100.0 * static_cast<double>(done.zingers_replaced) /
                         static_cast<double>(std::max<std::int64_t>(1, r.in.projections.size()))));
}

/// The projections: all of them, or for a slab-wise run with --center-of-rotation auto the 32
/// rows about the middle that the estimate needs (the units read their own rows later).
void read_input(recon_run& r) {
  const recon_cli_options& o = r.o;
  const bool auto_center = o.center_of_rotation == "auto";
  if (r.slabwise && !auto_center && !o.read.angles.empty()) {
    // No whole read below to carry the angle list's note (degrees that look like radians).
    const io::angle_list l = io::read_angle_list(o.read.angles, r.read.angles_in_radians);
    if (!l.warning.empty()) note(o.quiet, "note: " + l.warning);
  }
  if (r.slabwise && !auto_center) return;
  io::projection_read_options whole = r.read;
  if (r.slabwise) {  // the centre of rotation from 32 rows about the middle
    const std::int64_t rows = r.g.rows;
    const std::int64_t mid = rows / 2, half = std::min<std::int64_t>(16, (rows + 1) / 2);
    whole = io::row_band_options(r.read, rows, std::max<std::int64_t>(0, mid - half),
                                 std::min(rows, mid + half));
  }
  r.in = io::read_projections_any(o.input, whole);
  if (!r.in.warnings.empty()) note(o.quiet, "note: " + r.in.warnings);
  if (!r.slabwise) r.g = *r.in.geom;
  clean_input(r);
}

/// --center-of-rotation (a column, or estimated), then the warnings about the detector's
/// displacement that the centre decides.
void set_center(recon_run& r) {
  const recon_cli_options& o = r.o;
  if (o.center_of_rotation == "auto") {
    center_search_options so;
    so.threads = r.ro.threads;
    const center_estimate e = find_center_of_rotation(r.in.projections, *r.in.geom, so);
    fmt::print(
        "center of rotation: column {:.2f} (estimated, confidence {:.2f}, {} method; "
        "detector middle {:.1f})\n",
        e.column, e.confidence, e.method, 0.5 * static_cast<double>(r.g.cols - 1));
    std::fflush(stdout);
    if (e.confidence < low_center_confidence)
      fmt::print(stderr,
                 "ctforge: warning: the estimated rotation centre {:.2f} has low confidence "
                 "({:.2f} < {}): check it with `ctforge center {} --range A:B:STEP -o "
                 "montage.png` and give the column to --center-of-rotation\n",
                 e.column, e.confidence, low_center_confidence, o.input);
    r.g = with_center_of_rotation(r.g, e.column);
  } else if (!o.center_of_rotation.empty()) {
    r.g = with_center_of_rotation(
        r.g, parse_doubles("--center-of-rotation", o.center_of_rotation, {1})[0]);
  }
  if (!r.analytic) return;
  if (r.ro.displaced_detector == displaced_detector_mode::off && detector_is_displaced(r.g))
    note(o.quiet,
         "warning: --displaced-detector off: this detector reaches further to one side "
         "of the rotation axis than to the other; with the weights of a centred "
         "detector its unmatched columns count half, so the ring of the object beyond "
         "the narrow side is reconstructed wrong (truncation artefacts)");
  // A displaced detector on a short scan: the ring beyond the overlap lacks data. Printed
  // even with --quiet, as the low-confidence centre is: the volume is wrong there.
  const std::string w = displaced_short_scan_warning(r.g, r.ro);
  if (!w.empty()) fmt::print(stderr, "ctforge: warning: {}\n", w);
}

/// OSEM models non-negative data and keeps a start's sign: says what it takes as 0.
void note_osem_negatives(const recon_run& r) {
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
  if (const auto [n, low] = negatives(r.in.projections.data); n > 0)
    note(false, fmt::format("note: OSEM takes the {} negative projection values (down to {:.3g};"
                            " noise) as 0",
                            n, low));
  if (const auto [n, low] = negatives(r.ro.initial); n > 0)
    note(false, fmt::format("note: OSEM starts the {} negative voxels of --initial (down to "
                            "{:.3g}) at 0, where its multiplicative update keeps them",
                            n, low));
}

/// The iterative methods' options, the reconstruction grid and the warm start.
void set_method_and_grid(recon_run& r) {
  const recon_cli_options& o = r.o;
  recon_options& ro = r.ro;
  ro.iterations = o.iterations;
  ro.relaxation = o.relaxation;
  ro.nonnegative = o.nonnegative;
  ro.subsets = o.subsets;
  // (The library clamps the count to the views; given on the command line, more is a mistake.)
  CTFORGE_EXPECTS(!o.given("subsets") || o.subsets <= r.g.view_count(),
                  fmt::format("--subsets: {} subsets of {} views; at most one subset per view",
                              o.subsets, r.g.view_count()));
  ro.tv_weight = o.tv_weight;
  ro.tv_iterations = o.tv_iterations;
  ro.backprojector = parse_backprojector(o.backprojector);
  ro.tolerance = o.tolerance;
  r.vg = make_grid(o.grid, r.g, /*whole_in_memory=*/!r.streamed);
  if (!o.initial.empty()) {
    r.initial = read_initial(o.initial, r.vg);
    ro.initial = r.initial.data;
  }
  if (ro.algo == algorithm::osem && !o.quiet) note_osem_negatives(r);
}

/// The notes printed before the reconstruction starts.
void announce(const recon_run& r) {
  const recon_cli_options& o = r.o;
  if (!r.notice.empty() && r.ro.where == backend::automatic) note(o.quiet, "note: " + r.notice);
  if (!r.prep.empty()) note(o.quiet, "note: preprocessing: " + describe_preprocessing(r.prep));
  if (r.ro.algo == algorithm::fista_tv)
    note(o.quiet,
         "note: FISTA-TV first estimates its step, |A|^2, by power iteration (up to 12 "
         "forward and back-projections; a resumed run reuses the saved one)");
  if (r.where == backend::cuda && r.ro.gpu_hardware_interpolation && is_iterative(r.ro.algo) &&
      detail::backprojector_for(r.ro) == detail::backprojector_kind::matched)
    note(o.quiet,
         "note: --gpu-interpolation hardware: not with the matched back-projector, whose "
         "transpose needs the exact samples; projecting exactly");
}

/// What a checkpointed run depends on: a resumed run must be the same run.
nlohmann::json run_record(const recon_run& r) {
  const recon_cli_options& o = r.o;
  const volume_geometry& vg = r.vg;
  nlohmann::json record = {
      {"input", file_identity(o.input)},
      {"flat", file_identity(o.read.flat)},
      {"dark", file_identity(o.read.dark)},
      {"geometry_file", file_identity(o.read.geometry)},
      {"geometry", nlohmann::json::parse(geometry_to_json(r.g))},
      {"bin", o.read.bin},
      {"orientation", {o.read.transpose, o.read.flip_u, o.read.flip_v}},
      {"grid",
       {{"size", {vg.nx, vg.ny, vg.nz}},
        {"spacing_mm", vg.spacing_mm},
        {"origin_mm", vg.origin_mm}}},
      {"algorithm", r.algo_name},
      {"filter", to_string(r.ro.filter)},
      {"cutoff", r.ro.cutoff},
      {"displaced_detector", to_string(r.ro.displaced_detector)},
      {"offset_transition_px", r.ro.offset_transition_px},
      {"backend", r.where_name},
      {"gpu_interpolation", r.ro.gpu_hardware_interpolation ? "hardware" : "exact"}};
  if (r.ro.algo == algorithm::helical_fbp) record["helical_q"] = r.ro.helical_q;
  // The cleaning steps (recorded only when on: older directories resume).
  for (const preprocess_setting& s : preprocess_settings(r.prep))
    record["preprocess"][s.spelling] = s.value;
  // The datasets named in the input (recorded only when named: older directories resume).
  const auto& ds = o.read.datasets;
  if (!ds.data.empty() || !ds.flats.empty() || !ds.darks.empty() || !ds.angles.empty())
    record["datasets"] = {ds.data, ds.flats, ds.darks, ds.angles};
  return record;
}

/// DIR/assembled.json: the run whose units the output was assembled from and the output as it
/// was written (path, size, modification time). Left when the units are removed, so that a
/// share started after that (a replacement pod, a share whose units another process computed)
/// does not compute its units again.
std::filesystem::path assembled_path(const recon_run& r) {
  return std::filesystem::path(r.co.dir) / "assembled.json";
}

/// Whether DIR/assembled.json names this run (`r.assembled` without the output) and the
/// output as it is now.
bool assembled_before(const recon_run& r) {
  std::ifstream in(assembled_path(r));
  if (!in) return false;
  nlohmann::json there = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!there.is_object() ||
      there.value("output", nlohmann::json()) != file_identity(r.o.out.output))
    return false;
  there.erase("output");
  return there == r.assembled;
}

/// --unit-share: the share's missing units, computed and recorded. Returns whether every unit
/// of the run is recorded, so that this process assembles the output.
bool compute_share(recon_run& r, const band_source& rows, const nlohmann::json& record,
                   std::int64_t planes) {
  const recon_cli_options& o = r.o;
  const std::string name = fmt::format("share {}/{}", r.share->index, r.share->count);
  r.written_before = assembled_before(r);
  if (r.written_before) return false;
  r.share_done = compute_unit_share(rows, r.g, r.vg, r.ro, planes, r.co, record.dump(), *r.share,
                                    [&](const std::string& t) { note(o.quiet, t); });
  if (r.share_done.complete()) {
    note(o.quiet,
         fmt::format("{}: every unit of the run is recorded; writing {}", name, o.out.output));
    return true;
  }
  // Written by another process while this one computed: this share's units are not needed.
  r.written_before = assembled_before(r);
  if (r.written_before) remove_checkpoint(r.co);
  return false;
}

/// The checkpointed or memory-limited run: FDK / FBP unit by unit (`planes` z-planes each),
/// the iterative methods with their iterate saved. SIGINT / SIGTERM stop it at its next batch
/// or iteration with what is complete recorded (exit 130 / 143); a second signal ends it at
/// once.
void reconstruct_checkpointed(recon_run& r, std::int64_t planes) {
  const recon_cli_options& o = r.o;
  const nlohmann::json record = run_record(r);
  r.assembled = {{"run", record}, {"planes", planes}, {"ctforge", CTFORGE_VERSION}};
  const stop_on_signals stop(r.ro.cancel);
  // Each unit's rows and views read from the file; with cleaning steps, the rows of every view
  // with their margins (steps such as ring removal need every view), cleaned, then its views.
  const band_source rows =
      r.prep.empty() ? band_source([&](const slab_unit& u) {
        return io::read_projections_any(
                   o.input, io::unit_band_options(r.read, r.g.rows, u.r0, u.r1, u.v0, u.v1))
            .projections;
      })
                     : bands_from_rows(preprocessed_rows(
                           [&](std::int64_t r0, std::int64_t r1) {
                             return io::read_projections_any(
                                        o.input, io::row_band_options(r.read, r.g.rows, r0, r1))
                                 .projections;
                           },
                           r.g.rows, r.prep));
  const std::int64_t plane = r.vg.nx * r.vg.ny;
  const slab_sink sink = [&](const slab_unit& u, std::span<const float> data) {
    if (r.writer) {
      r.writer->write_planes(u.k0, data);
    } else {
      std::copy(data.begin(), data.end(), r.vol.data.begin() + u.k0 * plane);
    }
  };
  const auto print_note = [&](const std::string& t) { note(o.quiet, t); };
  try {
    // A share: its units; the output only once every unit of the run is recorded.
    if (r.share && !compute_share(r, rows, record, planes)) return;
    // A Zarr output's shards hold one unit each: each is written as its unit comes.
    if (r.streamed)
      r.writer = io::open_plane_writer(o.out.output, r.vg,
                                       planes > 0 ? planes : default_unit_planes(r.vg));
    if (r.slabwise && !r.streamed) r.vol = volume(r.vg);
    if (r.slabwise) {
      reconstruct_slabwise(rows, r.g, r.vg, r.ro, planes, r.co,
                           r.co.dir.empty() ? "{}" : record.dump(), sink, print_note);
    } else {  // SIRT: its iterate saved in co.dir
      r.vol =
          reconstruct_resumable(r.in.projections, r.g, r.vg, r.ro, r.co, record.dump(), print_note);
    }
  } catch (const cancelled& e) {
    if (stop.signal() == 0) throw;
    // The figures of the iterations done (a resumed run writes the whole run's).
    if (!o.log_iterations.empty() && !r.log.empty()) write_iteration_log(o.log_iterations, r.log);
    const auto* kept = dynamic_cast<const checkpoint_stopped*>(&e);
    const char* signal = stop.signal() == SIGTERM ? "SIGTERM" : "SIGINT";
    throw stopped(stop.signal(),
                  kept ? fmt::format("stopped by {}: {}; run the same command again to finish",
                                     signal, kept->recorded)
                       : fmt::format("stopped by {}; nothing was written", signal));
  }
}

/// The checkpoint options, checked, then the reconstruction: whole in memory, or checkpointed
/// / unit by unit.
void reconstruct_volume(recon_run& r) {
  const recon_cli_options& o = r.o;
  r.co.dir = o.checkpoint.dir;
  r.co.planes_per_unit = o.unit_planes;
  CTFORGE_EXPECTS(o.checkpoint_every >= 0,
                  fmt::format("--checkpoint-every: must be >= 0 (got {})", o.checkpoint_every));
  require_non_negative("--checkpoint-seconds", o.checkpoint_seconds);
  CTFORGE_EXPECTS(o.unit_planes >= 0,
                  fmt::format("--unit-planes: must be >= 0 (got {})", o.unit_planes));
  r.co.every_iterations = o.checkpoint_every;
  r.co.every_seconds = o.checkpoint_seconds;
  std::int64_t planes = o.unit_planes;
  if (r.slabwise && r.memory_limit > 0) {
    CTFORGE_EXPECTS(r.streamed, fmt::format("--memory-limit: the volume ({} bytes with the "
                                            "projections) is written slab by slab to .h5 "
                                            "and .zarr outputs only; write {} as one of "
                                            "those and convert it",
                                            r.whole_bytes, o.out.output));
    CTFORGE_EXPECTS(o.out.preview.empty(),
                    "--preview: needs the whole volume in memory; drop it with --memory-limit");
    planes = planes_within(r.g, r.vg, planes, r.memory_limit);
  }
  if (!r.slabwise && r.co.dir.empty()) {
    r.ro.memory_limit_bytes = r.memory_limit;  // FDK / FBP: their copies counted (0: the machine's)
    r.vol = reconstruct(r.in.projections, r.g, r.vg, r.ro);
  } else {
    reconstruct_checkpointed(r, planes);
  }
}

/// "N iterations, relaxation L", "filter F cutoff C", ... for the summary line; "K of N
/// iterations (tolerance reached)" when the tolerance stopped it.
std::string method_summary(const recon_options& ro, const std::vector<iteration_info>& log) {
  const bool early = is_iterative(ro.algo) && !log.empty() && log.back().iteration < ro.iterations;
  const std::string count = early ? fmt::format("{} of {}", log.back().iteration, ro.iterations)
                                  : fmt::format("{}", ro.iterations);
  const std::string stopped_early = early ? " (tolerance reached)" : "";
  switch (ro.algo) {
    case algorithm::sirt:
    case algorithm::os_sart:
      return fmt::format(
          "{} iterations{}, relaxation {:g}{}{}", count, stopped_early, ro.relaxation,
          ro.algo == algorithm::os_sart ? fmt::format(", {} subsets", ro.subsets) : "",
          ro.nonnegative ? ", non-negative" : "");
    case algorithm::cgls:
      return fmt::format("{} iterations{}", count, stopped_early);
    case algorithm::fista_tv:
      return fmt::format("{} iterations{}, TV weight {:g}{}", count, stopped_early, ro.tv_weight,
                         ro.nonnegative ? ", non-negative" : "");
    case algorithm::osem:
      return fmt::format("{} iterations{}, {} subsets", count, stopped_early, ro.subsets);
    default:
      return fmt::format("filter {} cutoff {:g}", to_string(ro.filter), ro.cutoff);
  }
}

/// The iteration log, the volume, the preview; the checkpoint directory is cleared once the
/// output holds its units. Ends with the summary line.
void write_outputs(recon_run& r, double s_read, double s_recon, const stopwatch& total) {
  const recon_cli_options& o = r.o;
  const std::string method = method_summary(r.ro, r.log);
  if (!o.log_iterations.empty()) write_iteration_log(o.log_iterations, r.log);
  const stopwatch t_write;
  io::volume_write_options wo;
  wo.mu_water_per_mm = o.out.mu_water;
  wo.series_description = "ctforge " + r.algo_name + " reconstruction";
  if (r.writer) {
    r.writer->commit();
  } else {
    io::write_volume_any(o.out.output, r.vol, wo);
  }
  if (!o.out.preview.empty()) {
    if (r.writer) r.vol = io::read_volume_any(o.out.output);  // --checkpoint-dir, no --memory-limit
    io::write_preview_png(o.out.preview, r.vol);
  }
  if (!r.co.dir.empty()) {  // the output holds the units now
    store_object_outputs();  // (s3:// outputs: in the store before the units are removed)
    if (r.slabwise) {
      nlohmann::json done = r.assembled;
      done["output"] = file_identity(o.out.output);
      const std::string text = done.dump(1) + "\n";
      const std::string path = assembled_path(r).string();
      io::write_atomically(path, [&](const std::string& tmp) {
        io::write_file_bytes(tmp, text.data(), text.size(), path);
      });
    }
    remove_checkpoint(r.co);
  }
  const volume_geometry& vg = r.vg;
  note(o.quiet,
       fmt::format("recon: wrote {}{} ({} x {} x {} voxels of {:g} x {:g} x {:g} mm; {} {} "
                   "{}): read {:.2f} s, reconstruct {:.2f} s, write {:.2f} s, total {:.2f} s",
                   o.out.output, o.out.preview.empty() ? "" : " and " + o.out.preview, vg.nx, vg.ny,
                   vg.nz, vg.spacing_mm[0], vg.spacing_mm[1], vg.spacing_mm[2], r.algo_name,
                   r.where_name, method, s_read, s_recon, t_write.seconds(), total.seconds()));
}

void run(const recon_cli_options& o) {
  const stopwatch total;
  recon_run r(o);
  r.ro = options_of(o);
  require_distinct_files(o);
  r.where = o.reference ? backend::cpu : resolve_backend(r.ro.where, &r.notice, r.ro.device);
  require_output_places(o);

  const stopwatch t_read;
  plan_input(r);
  read_input(r);
  set_center(r);
  set_method_and_grid(r);
  const double s_read = t_read.seconds();

  announce(r);
  const bool bar_on = !o.quiet;  // a bar on a terminal, else a line per tenth (progress_bar)
  const bool terminal = stderr_is_terminal();
  r.algo_name = to_string(r.ro.algo);
  r.where_name = r.where == backend::cuda ? "cuda" : (o.reference ? "cpu reference" : "cpu");
  progress_bar bar(
      fmt::format("{} ({}) {}x{}x{}", r.algo_name, r.where_name, r.vg.nx, r.vg.ny, r.vg.nz), bar_on,
      terminal);
  if (bar_on) r.ro.progress = [&bar](double f) { bar.update(f); };
  // The per-iteration figures: for the log, and on the bar where they cost nothing (OS-SART and
  // OSEM pay one more forward projection per pass for them).
  const bool figures_free = r.ro.algo != algorithm::os_sart && r.ro.algo != algorithm::osem;
  // (Not for the progress lines of a non-terminal: the figures cost a volume and a few passes.)
  if (is_iterative(r.ro.algo) &&
      (!o.log_iterations.empty() || (bar_on && figures_free && terminal)))
    r.ro.on_iteration = [&](const iteration_info& i) {
      r.log.push_back(i);
      bar.set_status(fmt::format("iteration {}, residual {:.4g}", i.iteration, i.residual));
    };
  const stopwatch t_recon;
  reconstruct_volume(r);
  const double s_recon = t_recon.seconds();
  bar.done();
  if (r.share && r.written_before) {
    note(o.quiet,
         fmt::format("recon: share {}/{}: {} was written from the units of this run by "
                     "another process ({}); nothing more to do",
                     r.share->index, r.share->count, o.out.output, assembled_path(r).string()));
    return;
  }
  if (r.share && !r.share_done.complete()) {
    note(o.quiet,
         fmt::format("recon: share {}/{} is recorded ({} units computed in {:.2f} s); "
                     "{} of the {} units of the run are recorded in {}. {} is written "
                     "by the share that records the last unit, or by this command "
                     "without --unit-share",
                     r.share->index, r.share->count, r.share_done.computed, s_recon,
                     r.share_done.recorded, r.share_done.total, o.checkpoint.dir, o.out.output));
    return;
  }
  if (r.where == backend::cuda && !is_iterative(r.ro.algo)) {
    const std::string how = describe_last_gpu_call(gpu_call::reconstruction);
    if (!how.empty()) note(o.quiet, how);
  }
  write_outputs(r, s_read, s_recon, total);
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
      ->type_name("PROJ.h5")
      ->transform(object_input("input"));
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
  sub->add_option("--center-of-rotation", o->center_of_rotation,
                  "Detector column (0-based) the rotation axis projects to, or auto to estimate "
                  "it from opposite views (printed)")
      ->type_name("COL|auto");
  sub->add_flag("--quiet", o->quiet, "Print nothing but errors");
  sub->add_flag("--reference", o->reference,
                "Use the slow double-precision CPU reference path (for validation)");
  add_volume_output_options(sub, o->out);
  add_projection_input_options(sub, o->read);
  add_preprocess_options(sub, o->prep);
  add_grid_options(sub, o->grid);
  CLI::Option_group* method = sub->add_option_group(
      k_method_group, "Options of some algorithms only; another algorithm refuses them");
  CLI::Option_group* checkpoint = add_checkpoint_options(sub, o->checkpoint);
  add_method_options(method, checkpoint, *o);
  add_execution_options(sub, o->exec, "a small value forces the volume to be split into slabs");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
