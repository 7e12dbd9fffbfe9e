#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/recon.hpp"

namespace ctforge::cli {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    // trim blanks
    const auto b = part.find_first_not_of(" \t");
    const auto e = part.find_last_not_of(" \t");
    parts.push_back(b == std::string::npos ? std::string() : part.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return parts;
}

std::string counts_text(std::initializer_list<std::size_t> counts) {
  std::string s;
  std::size_t i = 0;
  for (std::size_t c : counts) {
    if (i++) s += i == counts.size() ? " or " : ", ";
    s += std::to_string(c);
  }
  return s;
}

template <class T>
std::vector<T> parse_list(const std::string& option, const std::string& text,
                          std::initializer_list<std::size_t> counts, const char* what) {
  const auto parts = split(text);
  bool count_ok = false;
  for (std::size_t c : counts) count_ok = count_ok || c == parts.size();
  CTFORGE_EXPECTS(count_ok, fmt::format("{}: expected {} comma-separated {} (got '{}')", option,
                                        counts_text(counts), what, text));
  std::vector<T> out;
  for (const auto& p : parts) {
    T value{};
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
    CTFORGE_EXPECTS(!p.empty() && ec == std::errc() && end == p.data() + p.size(),
                    fmt::format("{}: '{}' is not a valid {} (in '{}')", option, p,
                                std::is_integral_v<T> ? "integer" : "number", text));
    if constexpr (std::is_floating_point_v<T>)
      CTFORGE_EXPECTS(std::isfinite(value), fmt::format("{}: '{}' is not finite", option, p));
    out.push_back(value);
  }
  return out;
}

}  // namespace

std::vector<double> parse_doubles(const std::string& option, const std::string& text,
                                  std::initializer_list<std::size_t> counts) {
  return parse_list<double>(option, text, counts, "numbers");
}

std::vector<std::int64_t> parse_ints(const std::string& option, const std::string& text,
                                     std::initializer_list<std::size_t> counts) {
  return parse_list<std::int64_t>(option, text, counts, "integers");
}

void require_positive(const std::string& option, double value) {
  CTFORGE_EXPECTS(std::isfinite(value) && value > 0,
                  fmt::format("{}: must be positive (got {})", option, value));
}

void require_non_negative(const std::string& option, double value) {
  CTFORGE_EXPECTS(std::isfinite(value) && value >= 0,
                  fmt::format("{}: must be >= 0 (got {})", option, value));
}

void require_thread_count(int threads) {
  detail::require_thread_count(threads, "--threads");
}

namespace {
// Absolute, normalised form of a path for comparisons (the file need not exist).
std::filesystem::path normal_form(const std::string& p) {
  std::error_code ec;
  auto c = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) c = std::filesystem::absolute(p).lexically_normal();
  std::string s = c.string();
  while (s.size() > 1 && s.ends_with('/')) s.pop_back();
  return s;
}
bool inside(const std::filesystem::path& child, const std::filesystem::path& dir) {
  auto d = dir.begin(), c = child.begin();
  for (; d != dir.end(); ++d, ++c)
    if (c == child.end() || *c != *d) return false;
  return c != child.end();
}
}  // namespace

namespace {
// A detached header comes with a data file beside it, named by ITK: "<stem>.raw" or ".zraw"
// (MetaImage .mhd), "<stem>.raw" or ".raw.gz" (NRRD .nhdr). An output may write either; an
// input's is the one that exists.
std::vector<named_path> with_data_files(const std::vector<named_path>& paths, bool existing_only) {
  std::vector<named_path> all;
  for (const auto& p : paths) {
    if (p.path.empty()) continue;
    all.push_back(p);
    const bool mhd = p.path.ends_with(".mhd"), nhdr = p.path.ends_with(".nhdr");
    if (!mhd && !nhdr) continue;
    const std::string stem = p.path.substr(0, p.path.size() - (mhd ? 4 : 5));
    for (const char* data : {".raw", mhd ? ".zraw" : ".raw.gz"}) {
      std::error_code ec;
      if (existing_only && !std::filesystem::exists(stem + data, ec)) continue;
      all.push_back({p.option + " (its data file)", stem + data});
    }
  }
  return all;
}
}  // namespace

void require_distinct_paths(const std::vector<named_path>& outputs_given,
                            const std::vector<named_path>& inputs_given) {
  const std::vector<named_path> outputs = with_data_files(outputs_given, false);
  const std::vector<named_path> inputs = with_data_files(inputs_given, true);
  std::vector<std::pair<const named_path*, std::filesystem::path>> outs;
  for (const auto& o : outputs)
    if (!o.path.empty()) outs.emplace_back(&o, normal_form(o.path));
  for (const auto& i : inputs) {
    if (i.path.empty()) continue;
    const auto in = normal_form(i.path);
    for (const auto& [o, out] : outs) {
      CTFORGE_EXPECTS(in != out,
                      fmt::format("{} {}: is also the {} ({}); writing it would destroy the "
                                  "input",
                                  o->option, o->path, i.option, i.path));
      std::error_code ec;
      CTFORGE_EXPECTS(!(std::filesystem::is_directory(out, ec) && inside(in, out)),
                      fmt::format("{} {}: the {} {} lies inside this output directory, which "
                                  "the run replaces",
                                  o->option, o->path, i.option, i.path));
    }
  }
  for (std::size_t a = 0; a < outs.size(); ++a)
    for (std::size_t b = a + 1; b < outs.size(); ++b)
      CTFORGE_EXPECTS(
          outs[a].second != outs[b].second,
          fmt::format("{} and {}: both name {}; give each output its own file",
                      outs[a].first->option, outs[b].first->option, outs[a].first->path));
}

std::int64_t parse_byte_size(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024.0;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024.0 * 1024.0;
  else if (!suffix.empty())
    used = 0;
  CTFORGE_EXPECTS(used > 0 && std::isfinite(value) && value > 0 && value * scale < 9.0e18,
                  fmt::format("{}: expected a positive size in bytes, optionally with a K, M or G "
                              "suffix (got '{}')",
                              option, text));
  return static_cast<std::int64_t>(value * scale);
}

void require_writable_dir(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  CTFORGE_EXPECTS(!path.empty(), option + ": empty file name");
  const fs::path p(path);
  std::error_code ec;
  CTFORGE_EXPECTS(!fs::is_directory(p, ec),
                  fmt::format("{}: '{}' is a directory; a file name is expected", option, path));
  CTFORGE_EXPECTS(!path.ends_with('/'),
                  fmt::format("{}: '{}' ends in '/'; a file name is expected", option, path));
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  CTFORGE_EXPECTS(fs::is_directory(dir, ec),
                  fmt::format("{}: directory '{}' does not exist", option, dir.string()));
}

void require_output_directory(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  CTFORGE_EXPECTS(!path.empty(), option + ": empty file name");
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const fs::path p(dir);
  const std::string ext = p.extension().string();
  CTFORGE_EXPECTS(!path.ends_with('/') || ext.empty() || ext == ".dcm" || ext == ".zarr",
                  fmt::format("{}: '{}' ends in '/' (a directory) but names a {} file; drop the "
                              "'/' for a file",
                              option, path, ext));
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  CTFORGE_EXPECTS(fs::is_directory(parent, ec),
                  fmt::format("{}: directory '{}' does not exist", option, parent.string()));
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& s) { return s.empty() ? std::string("empty file name") : std::string(); },
      "");
}

// ---- option groups ----------------------------------------------------------------------

CLI::Option_group* add_projection_input_options(CLI::App* sub, projection_input_options& o) {
  CLI::Option_group* g =
      sub->add_option_group(k_projection_input_group, "How the projection file is read");
  g->add_option("--geometry", o.geometry,
                "Geometry JSON file (whole stored scan) to use instead of the file's; required "
                "for TIFF stacks")
      ->type_name("FILE")
      ->transform(object_input("--geometry"));
  g->add_flag("--transpose", o.transpose,
              "Projections: swap detector rows and columns (before --flip-u / --flip-v)");
  g->add_flag("--flip-u", o.flip_u, "Projections: reverse the detector columns");
  g->add_flag("--flip-v", o.flip_v,
              "Projections: reverse the detector rows (files that store the top row first)");
  g->add_option("--flat", o.flat, "Flat-field TIFF image(s) (file, directory or glob)")
      ->type_name("PATH")
      ->transform(object_input("--flat"));
  g->add_option("--dark", o.dark, "Dark-field TIFF image(s) (file, directory or glob)")
      ->type_name("PATH")
      ->transform(object_input("--dark"));
  g->add_option("--data-path", o.datasets.data,
                "HDF5 input: dataset of the frames [n][rows][cols], in any layout (default: "
                "found by NXtomo definition or DataExchange's /exchange/data); .mat input: "
                "the variable (default: the only 2D/3D numeric one)")
      ->type_name("DATASET");
  g->add_option("--flat-path", o.datasets.flats,
                "HDF5 input: dataset of the flat fields [n][rows][cols]")
      ->type_name("DATASET");
  g->add_option("--dark-path", o.datasets.darks,
                "HDF5 input: dataset of the dark fields [n][rows][cols]")
      ->type_name("DATASET");
  g->add_option("--angles-path", o.datasets.angles,
                "HDF5 input: dataset of the rotation angles (degrees unless its units "
                "attribute says rad), one per projection or one per frame")
      ->type_name("DATASET");
  g->add_option("--angles", o.angles,
                "Angle-list text file (one angle per line, '#' comments; optional 2nd column: "
                "image key 0 projection, 1 flat, 2 dark, 3 invalid, one line per stored frame): "
                "builds a parallel-beam geometry instead of --geometry; or START:STOP:COUNT, "
                "COUNT angles from START to STOP, both included (e.g. 0:179:180)")
      ->type_name("FILE|A:B:N")
      ->transform(object_input("--angles"));
  g->add_option("--angle-unit", o.angle_unit,
                "Unit of the --angles list; radians must be stated (rad)")
      ->check(CLI::IsMember({"deg", "rad"}))
      ->capture_default_str();
  g->add_flag("--sinogram", o.sinogram,
              "The input is one sinogram (views x cols): a single 2D TIFF image, .npy or .mat "
              "array, read as one detector row (automatic for 2D .npy/.mat, and for a TIFF "
              "image with as many rows as --angles has lines)");
  g->add_option("--open-beam-cols", o.open_beam_cols,
                "Normalise without flat fields: columns A to B-1 (and C to D-1, ...) of the "
                "stored images see no object; per view and row I0 = their mean, p = -log(I/I0)")
      ->type_name("A:B[,C:D]");
  g->add_option("--pixel-size", o.pixel_size,
                "Detector pixel pitch (mm) where the file does not record it (DataExchange, "
                "--angles)")
      ->type_name("MM")
      ->capture_default_str();
  g->add_option("--bin", o.bin, "Average N x N detector pixels as they are read")
      ->type_name("N")
      ->capture_default_str();
  return g;
}

CLI::Option_group* add_preprocess_options(CLI::App* sub, preprocess_cli_options& o) {
  CLI::Option_group* g = sub->add_option_group(
      k_preprocess_group,
      "Cleaning after normalisation, before reconstruction, in this order (off unless given; "
      "docs: real-data guide, Preparing raw scans)");
  const auto table = preprocess_option_table();
  o.values.assign(table.size(), std::string());  // bound below: never resized afterwards
  o.options.clear();
  for (std::size_t i = 0; i < table.size(); ++i)
    o.options.push_back(
        g->add_option(std::string(table[i].flag), o.values[i], std::string(table[i].help))
            ->type_name(std::string(table[i].type)));
  return g;
}

preprocess_options preprocess_options_of(const preprocess_cli_options& o,
                                         const execution_context& ctx) {
  const auto table = preprocess_option_table();
  std::vector<preprocess_setting> given;
  for (std::size_t i = 0; i < o.options.size(); ++i)
    if (o.options[i]->count() > 0) given.push_back({std::string(table[i].flag), o.values[i]});
  preprocess_options p = parse_preprocess_options(given);
  p.where = ctx.where;
  p.device = ctx.device;
  p.threads = ctx.threads;
  p.gpu_memory_limit_bytes = ctx.gpu_memory_limit_bytes;
  return p;
}

std::string describe_preprocessing(const preprocess_options& opt) {
  std::string out;
  std::vector<std::string> details;  // of the step last named: "size 3"
  const auto close_step = [&] {
    if (!details.empty()) out += fmt::format(" ({})", fmt::join(details, ", "));
    details.clear();
  };
  const auto table = preprocess_option_table();
  for (const preprocess_setting& s : preprocess_settings(opt)) {
    const auto e = std::find_if(table.begin(), table.end(),
                                [&](const preprocess_option& x) { return x.name == s.spelling; });
    if (e == table.end() || e->step.empty()) {  // a step: zingers, rings, phase, ...
      close_step();
      out += fmt::format("{}{} {}", out.empty() ? "" : "; ", s.spelling, s.value);
      continue;
    }
    // zinger_size -> size, phase_energy -> energy; delta_beta stays
    const std::string first = s.spelling.substr(0, s.spelling.find('_'));
    const bool of_step = std::string_view(e->step).starts_with(first);
    details.push_back(
        fmt::format("{} {}", of_step ? s.spelling.substr(first.size() + 1) : s.spelling, s.value));
  }
  close_step();
  return out;
}

void check_projection_input(const projection_input_options& o) {
  require_positive("--pixel-size", o.pixel_size);
  CTFORGE_EXPECTS(o.bin >= 1, fmt::format("--bin: must be >= 1 (got {})", o.bin));
}

io::projection_read_options projection_read_options_of(const projection_input_options& o) {
  check_projection_input(o);
  io::projection_read_options read;
  read.geometry_path = o.geometry;
  read.flat_path = o.flat;
  read.dark_path = o.dark;
  read.datasets = o.datasets;
  read.transpose = o.transpose;
  read.flip_u = o.flip_u;
  read.flip_v = o.flip_v;
  read.pixel_size_mm = o.pixel_size;
  read.bin_rows = read.bin_cols = o.bin;
  read.angles_path = o.angles;
  read.angles_in_radians = o.angle_unit == "rad";
  read.sinogram = o.sinogram;
  read.open_beam_cols = parse_column_ranges("--open-beam-cols", o.open_beam_cols);
  return read;
}

std::vector<named_path> projection_input_paths(const projection_input_options& o) {
  return {
      {"--geometry", o.geometry}, {"--flat", o.flat}, {"--dark", o.dark}, {"--angles", o.angles}};
}

CLI::Option_group* add_grid_options(CLI::App* sub, grid_options& o) {
  CLI::Option_group* g = sub->add_option_group(k_grid_group, "The voxel grid of the volume");
  o.size_opt = g->add_option("--size", o.size,
                             "Cubic grid of N voxels per axis (N x N x 1 for a single-row "
                             "detector). Default: detector cols x cols x rows")
                   ->type_name("N");
  o.size_xyz_opt = g->add_option("--size-xyz", o.size_xyz, "Grid size in voxels: X,Y,Z")
                       ->type_name("X,Y,Z")
                       ->excludes(o.size_opt);
  o.spacing_opt = g->add_option("--spacing", o.spacing,
                                "Voxel size in mm: one value (isotropic) or X,Y,Z. Default: the "
                                "detector's field of view at the isocentre divided by the size "
                                "(pixel pitch x SID/SDD without a size option)")
                      ->type_name("MM[,MM,MM]");
  o.origin_opt = g->add_option("--origin", o.origin,
                               "Centre of voxel (0,0,0) in mm. Default: grid centred on the "
                               "isocentre")
                     ->type_name("X,Y,Z");
  return g;
}

CLI::Option_group* add_execution_options(CLI::App* sub, execution_options& o,
                                         const std::string& memory_help) {
  CLI::Option_group* g = sub->add_option_group(k_execution_group, "Where and how the work runs");
  g->add_option("--threads", o.threads, "CPU threads (0 = all cores)")
      ->type_name("N")
      ->capture_default_str();
  if (memory_help.empty()) return g;
  g->add_option("--backend", o.backend,
                "auto (CUDA when a usable device exists, else CPU), cpu or cuda")
      ->type_name("NAME")
      ->capture_default_str();
  g->add_option("--device", o.device, "CUDA device ordinal")->type_name("N")->capture_default_str();
  g->add_option(
       "--gpu-memory-limit", o.gpu_memory_limit,
       "Upper bound on GPU memory used (bytes, or with a K/M/G suffix, e.g. 2G); " + memory_help)
      ->type_name("SIZE");
  g->add_option("--gpu-interpolation", o.interpolation,
                "CUDA backend: exact (fp32 bilinear, the CPU's arithmetic) or hardware (texture "
                "unit: faster, ~1e-4 of the peak from the CPU result)")
      ->check(CLI::IsMember({"exact", "hardware"}))
      ->type_name("MODE")
      ->capture_default_str();
  return g;
}

execution_context parse_execution_options(const execution_options& o) {
  require_thread_count(o.threads);
  execution_context c;
  c.threads = o.threads;
  require_non_negative("--device", o.device);
  c.device = o.device;
  if (!o.gpu_memory_limit.empty())
    c.gpu_memory_limit_bytes = parse_byte_size("--gpu-memory-limit", o.gpu_memory_limit);
  c.where = parse_backend(o.backend);
  c.gpu_hardware_interpolation = o.interpolation == "hardware";
  return c;
}

CLI::Option_group* add_checkpoint_options(CLI::App* sub, checkpoint_cli_options& o) {
  CLI::Option_group* g =
      sub->add_option_group(k_checkpoint_group, "Resumable and larger-than-memory runs");
  g->add_option("--checkpoint-dir", o.dir,
                "Resumable run: FDK / FBP slab by slab, each slab recorded in DIR as it "
                "completes; the iterative methods with their state saved there. The same "
                "command resumes an interrupted run (SIGINT / SIGTERM stop it at the next "
                "batch or iteration, exit 130 / 143); the units are removed once the output is "
                "written (FDK / FBP leave DIR/assembled.json, naming the run the output was "
                "written from)")
      ->type_name("DIR")
      ->check(non_empty_path())
      ->transform(local_only("--checkpoint-dir",
                             "python -m ctforge.distributed recon keeps its checkpoints at "
                             "s3:// URLs"));
  g->add_option("--unit-share", o.unit_share,
                "FDK / FBP / helical FBP with --checkpoint-dir on a file system that several "
                "processes or machines share: compute only the slab units i with i % N == K "
                "that DIR does not hold yet, record them, then write the output if every unit "
                "of the run is recorded (by any share) or else exit 0 saying how many are. The "
                "share that records the last unit writes the output, or the same command "
                "without --unit-share does. Kubernetes Indexed Job: --unit-share "
                "$(JOB_COMPLETION_INDEX)/N")
      ->type_name("K/N");
  g->add_option("--memory-limit", o.memory_limit,
                "FDK / FBP: host memory for projections and volume (e.g. 8G). A larger job "
                "runs slab by slab, each slab reading only its detector rows from the input "
                "and written straight into the .h5 output")
      ->type_name("SIZE");
  return g;
}

CLI::Option_group* add_volume_output_options(CLI::App* sub, volume_output_options& o) {
  CLI::Option_group* g = sub->add_option_group(k_output_group, "What is written");
  g->add_option("-o,--output", o.output,
                "Output volume: .h5, .mha/.mhd, .nrrd, .nii/.nii.gz, or a DICOM series directory")
      ->required()
      ->type_name("FILE")
      ->check(non_empty_path())
      ->transform(object_output("--output"));
  g->add_option("--preview", o.preview,
                "Also write a PNG of the three central slices (axial, coronal, sagittal)")
      ->type_name("FILE.png")
      ->check(non_empty_path())
      ->transform(object_output("--preview"));
  g->add_option("--mu-water", o.mu_water,
                "DICOM output: HU = 1000 (mu - mu_water) / mu_water, mu_water in 1/mm")
      ->type_name("MU")
      ->capture_default_str();
  return g;
}

volume_geometry make_grid(const grid_options& o, const geometry& g, bool whole_in_memory) {
  grid_request r;
  r.whole_in_memory = whole_in_memory;
  if (o.size) {
    CTFORGE_EXPECTS(*o.size >= 1,
                    fmt::format("--size: must be a positive integer (got {})", *o.size));
    r.size = {*o.size, *o.size, g.rows == 1 ? 1 : *o.size};
  } else if (!o.size_xyz.empty()) {
    const auto v = parse_ints("--size-xyz", o.size_xyz, {3});
    for (std::int64_t n : v)
      CTFORGE_EXPECTS(n >= 1, fmt::format("--size-xyz: sizes must be positive integers (got '{}')",
                                          o.size_xyz));
    r.size = {v[0], v[1], v[2]};
    r.size_option = "--size-xyz";
  }
  if (!o.spacing.empty()) {
    const auto v = parse_doubles("--spacing", o.spacing, {1, 3});
    for (double s : v) require_positive("--spacing", s);
    r.spacing_mm = v.size() == 1 ? std::array<double, 3>{v[0], v[0], v[0]}
                                 : std::array<double, 3>{v[0], v[1], v[2]};
  }
  if (!o.origin.empty()) {
    const auto v = parse_doubles("--origin", o.origin, {3});
    r.origin_mm = {v[0], v[1], v[2]};
  }
  return default_grid(g, r);
}

bool stderr_is_terminal() {
  return ::isatty(2) == 1;
}

progress_bar::progress_bar(std::string label, bool enabled, bool terminal)
    : label_(std::move(label)),
      enabled_(enabled),
      terminal_(terminal),
      start_(std::chrono::steady_clock::now()) {
  last_ = start_;
}

progress_bar::~progress_bar() {
  done();
}

void progress_bar::update(double fraction) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!terminal_) {
    fraction = std::clamp(fraction, 0.0, 1.0);
    const int tenth = static_cast<int>(fraction * 10);
    const double since = std::chrono::duration<double>(now - last_).count();
    if (fraction >= 1.0 || !((tenth > last_tenth_ && since >= 5) || since >= 30)) return;
    last_ = now;
    last_tenth_ = tenth;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    fmt::print(stderr, "ctforge: {} {:.0f}%, {:.0f} s, {:.0f} s left{}{}\n", label_,
               100.0 * fraction, elapsed,
               fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0,
               status_.empty() ? "" : "; ", status_);
    std::fflush(stderr);
    return;
  }
  if (drawn_ && fraction < 1.0 && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  fraction = std::clamp(fraction, 0.0, 1.0);
  constexpr int width = 30;
  const int filled = static_cast<int>(fraction * width + 0.5);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta;
  if (fraction > 0.02 && fraction < 1.0)
    eta = fmt::format(", {:.0f} s left", elapsed * (1.0 - fraction) / fraction);
  fmt::print(stderr, "\r{} [{}{}] {:3.0f}% {:.1f} s{}{}{}\x1b[K", label_, std::string(filled, '#'),
             std::string(width - filled, ' '), 100.0 * fraction, elapsed, eta,
             status_.empty() ? "" : "; ", status_);
  std::fflush(stderr);
  drawn_ = true;
}

void progress_bar::done() {
  if (enabled_ && terminal_ && drawn_) {
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

std::vector<std::pair<std::int64_t, std::int64_t>> parse_column_ranges(const std::string& option,
                                                                       const std::string& text) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (text.empty()) return out;
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t e = std::min(text.find(',', i), text.size());
    const std::string part = text.substr(i, e - i);
    const auto colon = part.find(':');
    CTFORGE_EXPECTS(colon != std::string::npos,
                    fmt::format("{}: '{}' is not a column range A:B", option, part));
    const auto v = parse_ints(option, part.substr(0, colon) + "," + part.substr(colon + 1), {2});
    CTFORGE_EXPECTS(
        0 <= v[0] && v[0] < v[1],
        fmt::format("{}: range {}: expected 0 <= A < B (columns A to B-1)", option, part));
    out.emplace_back(v[0], v[1]);
    i = e + 1;
  }
  return out;
}

void note(bool quiet, const std::string& text) {
  if (!quiet) fmt::print(stderr, "ctforge: {}\n", with_object_urls(text));
}

namespace {
std::atomic<int> g_stop_signal{0};
const cancellation_token* g_stop_token = nullptr;
struct sigaction g_old_int {
}, g_old_term{};

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal.exchange(sig) != 0) {
    std::signal(sig, SIG_DFL);  // the second signal: the default action, at once
    std::raise(sig);
    return;
  }
  if (g_stop_token) g_stop_token->request();  // an atomic store: async-signal-safe
}
}  // namespace

stop_on_signals::stop_on_signals(const cancellation_token& token) {
  g_stop_token = &token;
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, nullptr, &g_old_int);
  sigaction(SIGTERM, nullptr, &g_old_term);
  if (g_old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
  if (g_old_term.sa_handler != SIG_IGN) sigaction(SIGTERM, &sa, nullptr);
}

stop_on_signals::~stop_on_signals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_stop_token = nullptr;
}

int stop_on_signals::signal() const {
  return g_stop_signal.load();
}

}  // namespace ctforge::cli
