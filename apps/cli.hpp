// Shared pieces of the `ctforge` command line: option parsing helpers, the reconstruction grid
// options, progress reporting. Each subcommand lives in its own apps/<name>.cpp and registers
// itself with add_<name>(app), which returns the function to run when it was selected.
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/cancel.hpp"
#include "ctforge/execution.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/preprocess.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::cli {

/// Runs the selected subcommand (called after a successful parse).
using runner = std::function<void()>;

runner add_simulate(CLI::App& app);
runner add_recon(CLI::App& app);
runner add_info(CLI::App& app);
runner add_compare(CLI::App& app);
runner add_convert(CLI::App& app);     // apps/convert.cpp (formats)
runner add_preprocess(CLI::App& app);  // apps/convert.cpp (cleaned projections)
runner add_center(CLI::App& app);      // apps/center.cpp (rotation centre)

// ---- option values ------------------------------------------------------------------------

/// Parses "a,b,c" into numbers; `counts` lists the accepted number of values. Throws
/// usage_error "<option>: ..." on malformed input.
std::vector<double> parse_doubles(const std::string& option, const std::string& text,
                                  std::initializer_list<std::size_t> counts);
std::vector<std::int64_t> parse_ints(const std::string& option, const std::string& text,
                                     std::initializer_list<std::size_t> counts);

/// Throws usage_error "<option>: must be ... (got x)" unless the check holds.
void require_positive(const std::string& option, double value);
void require_non_negative(const std::string& option, double value);
/// --threads: 0 (all cores) up to 4 x the cores this machine has; more is a usage error (an
/// OpenMP runtime asked for 100000 threads crashes).
void require_thread_count(int threads);

/// A named path on the command line ("-o" / "--output", "input", "--geometry", ...).
struct named_path {
  std::string option, path;
};
/// Usage error when an output is the same file as an input or as another output, or an input
/// lies inside an output directory (a DICOM series, a TIFF stack): the run would destroy it.
/// Empty paths are skipped.
void require_distinct_paths(const std::vector<named_path>& outputs,
                            const std::vector<named_path>& inputs);
/// Parses a byte count: an integer optionally followed by K, M or G (powers of 1024), e.g.
/// "512M". Throws usage_error "<option>: ..." unless it is a positive size.
std::int64_t parse_byte_size(const std::string& option, const std::string& text);
/// The directory of an output path must exist (checked before any long computation); the path
/// must name a file: not empty, not an existing directory, not ending in '/'.
/// s3:// URLs in file options (apps/object_paths.cpp). The transform of an input option
/// replaces a URL by the path it is downloaded to before the command runs (HDF5 files are read
/// in place by ranged requests and stay URLs); that of an output option by a path in the
/// process's staging directory, stored at the URL once the command has succeeded.
CLI::Validator object_input(const std::string& option);
CLI::Validator object_output(const std::string& option);
/// Refuses an s3:// URL for an option that takes a local path, saying what to do `instead`.
CLI::Validator local_only(const std::string& option, const std::string& instead);
/// Before the command runs: the staged inputs downloaded (an output naming an input's URL is a
/// usage error).
void fetch_object_inputs();
/// Every staged output the command wrote, stored at its URL (each once): after the command
/// succeeded, and by a command before it removes what its output replaces (checkpoint units).
void store_object_outputs();
/// An s3:// object as the store has it: URL, size (-1: none there) and ETag.
struct object_id {
  std::string url;
  std::int64_t size = -1;
  std::string etag;
};
/// For a path that stands for an s3:// URL (a staged input or output, or an HDF5 input read in
/// place): the object as the store has it now, the same in every process; nullopt for other
/// paths.
std::optional<object_id> object_identity(const std::string& path);
/// `text` with the staged paths replaced by the URLs they stand for (messages).
std::string with_object_urls(std::string text);

void require_writable_dir(const std::string& option, const std::string& path);
/// For outputs that are directories (a DICOM series, a TIFF stack): not empty, the parent
/// directory exists, and a name ending in '/' does not carry a file extension ("v.h5/": a
/// file name with a stray '/').
void require_output_directory(const std::string& option, const std::string& path);
/// CLI11 check for output paths: '' on the command line is refused, naming the option (an
/// optional output given empty would otherwise be silently skipped).
CLI::Validator non_empty_path();

// ---- option groups ----------------------------------------------------------------------
// Each group of options is declared once, by one function, and listed under its own heading in
// `--help` (a CLI11 option group); every subcommand that takes the group calls the function.

/// The group headings, as `--help` prints them.
inline constexpr const char* k_projection_input_group = "Projection input";
inline constexpr const char* k_grid_group = "Grid";
inline constexpr const char* k_execution_group = "Execution";
inline constexpr const char* k_checkpoint_group = "Checkpoint";
inline constexpr const char* k_output_group = "Output";
inline constexpr const char* k_preprocess_group = "Preprocessing";

// ---- projection input (recon, center, convert) ----------------------------------------------

/// How a projection file is read: --geometry, --flat, --dark, the HDF5 datasets (--data-path,
/// --flat-path, --dark-path, --angles-path), --transpose / --flip-u / --flip-v, --angles,
/// --angle-unit, --sinogram, --open-beam-cols, --pixel-size and --bin.
struct projection_input_options {
  std::string geometry, flat, dark;
  io::hdf5_scan_paths datasets;
  bool transpose = false, flip_u = false, flip_v = false;
  std::string angles;
  std::string angle_unit = "deg";
  bool sinogram = false;
  std::string open_beam_cols;
  double pixel_size = 1;
  int bin = 1;
};
/// Adds the group; the subcommand may add options of its own to the group it returns.
CLI::Option_group* add_projection_input_options(CLI::App* sub, projection_input_options& o);
/// --pixel-size and --bin, checked (usage_error naming the option).
void check_projection_input(const projection_input_options& o);
/// The options as io::projection_read_options, checked (check_projection_input, and a
/// malformed --open-beam-cols).
io::projection_read_options projection_read_options_of(const projection_input_options& o);
/// The input files the options name (--geometry, --flat, --dark, --angles), for
/// require_distinct_paths.
std::vector<named_path> projection_input_paths(const projection_input_options& o);
/// "A:B[,C:D...]": half-open column ranges [A, B); usage_error "<option>: ..." unless A < B.
std::vector<std::pair<std::int64_t, std::int64_t>> parse_column_ranges(const std::string& option,
                                                                       const std::string& text);

// ---- preprocessing (recon, convert, preprocess) -----------------------------------------

/// The options of preprocess_option_table() (--zingers, --rings, ...), as given.
struct preprocess_cli_options {
  std::vector<std::string> values;  // one per table entry, in table order
  std::vector<CLI::Option*> options;
};
/// Adds the group: every entry of preprocess_option_table() with its flag and help text.
CLI::Option_group* add_preprocess_options(CLI::App* sub, preprocess_cli_options& o);
/// The options given, parsed (usage_error naming the flag), to run where `ctx` says.
preprocess_options preprocess_options_of(const preprocess_cli_options& o,
                                         const execution_context& ctx);
/// "zingers 0.3 (size 3, views 1); rings all (size 21, ...)" for notes; empty when no step is on.
std::string describe_preprocessing(const preprocess_options& opt);

// ---- volume grid --------------------------------------------------------------------------

/// --size / --size-xyz / --spacing / --origin.
struct grid_options {
  std::optional<std::int64_t> size;
  std::string size_xyz;
  std::string spacing;
  std::string origin;
  CLI::Option* size_opt = nullptr;
  CLI::Option* size_xyz_opt = nullptr;
  CLI::Option* spacing_opt = nullptr;
  CLI::Option* origin_opt = nullptr;
};
CLI::Option_group* add_grid_options(CLI::App* sub, grid_options& o);

/// Voxel grid from the options and the geometry (see the help text of add_grid_options):
///  * no size option: nx = ny = detector cols, nz = detector rows;
///  * --size N: N x N x N, or N x N x 1 for a single-row (fan-beam) detector;
///  * --size-xyz X,Y,Z: as given;
///  * --spacing: one value (isotropic) or three (x, y, z), in mm. Default: the detector's field
///    of view at the isocentre divided by the size, i.e. (cols * pixel_u / M) / nx in x and y
///    and (rows * pixel_v / M) / nz in z, with the magnification M = SDD / SID for cone beams
///    (1 for parallel beams). Without a size option this is pixel pitch * SID / SDD;
///  * --origin X,Y,Z: centre of voxel (0, 0, 0) in mm; default: grid centred on the isocentre.
volume_geometry make_grid(const grid_options& o, const geometry& g, bool whole_in_memory = true);

// ---- execution ----------------------------------------------------------------------------

/// --threads, and for the subcommands that can run on a GPU --backend / --device /
/// --gpu-memory-limit / --gpu-interpolation: the fields of an execution_context.
struct execution_options {
  int threads = 0;
  std::string backend = "auto";
  int device = 0;
  std::string gpu_memory_limit;  // empty: automatic
  std::string interpolation = "exact";
};
/// Adds --threads and, with a non-empty `memory_help` (what a small --gpu-memory-limit does
/// there), the GPU options.
CLI::Option_group* add_execution_options(CLI::App* sub, execution_options& o,
                                         const std::string& memory_help = {});
/// The options, validated (usage_error naming the option otherwise), as an execution context
/// (its backend as asked: resolve_backend picks the device).
execution_context parse_execution_options(const execution_options& o);

// ---- checkpoint ---------------------------------------------------------------------------

/// --checkpoint-dir, --unit-share and --memory-limit (the options that need them come from the
/// table of recon options, include/ctforge/options.hpp).
struct checkpoint_cli_options {
  std::string dir;
  std::string unit_share;    // "K/N": this process's share of the slab units; empty: all
  std::string memory_limit;  // host memory for FDK / FBP data; empty: no limit
};
CLI::Option_group* add_checkpoint_options(CLI::App* sub, checkpoint_cli_options& o);

// ---- output -------------------------------------------------------------------------------

/// A reconstructed volume: -o / --output, --preview, --mu-water.
struct volume_output_options {
  std::string output;
  std::string preview;
  double mu_water = io::default_mu_water_per_mm;
};
CLI::Option_group* add_volume_output_options(CLI::App* sub, volume_output_options& o);

// ---- reporting ----------------------------------------------------------------------------

/// True when stderr is a terminal.
bool stderr_is_terminal();

/// Progress on stderr when enabled (not --quiet): on a terminal a bar redrawn at most ~10 times
/// per second; otherwise (a log file, a batch system) a line "ctforge: <label> 40%, ..." at each
/// further tenth done at least 5 s after the last line, and at least every 30 s.
class progress_bar {
 public:
  progress_bar(std::string label, bool enabled, bool terminal = true);
  ~progress_bar();
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  /// fraction in [0, 1].
  void update(double fraction);
  /// Text shown after the bar from the next update on (e.g. "iteration 3, residual 0.012").
  void set_status(std::string status) { status_ = std::move(status); }
  /// Erases the bar.
  void done();

 private:
  std::string label_;
  std::string status_;
  bool enabled_;
  bool terminal_;
  bool drawn_ = false;
  int last_tenth_ = 0;  // lines: the tenths done at the last line
  std::chrono::steady_clock::time_point start_, last_;
};

/// Wall-clock stopwatch.
class stopwatch {
 public:
  stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Status line on stderr ("ctforge: <text>") unless quiet.
void note(bool quiet, const std::string& text);

// ---- stopping long runs -------------------------------------------------------------------

/// While alive, the first SIGINT / SIGTERM requests `token` (the run stops at its next batch or
/// iteration) and the second ends the process at once (the default action). Restores the
/// previous handlers when destroyed; signals the process was started ignoring stay ignored.
class stop_on_signals {
 public:
  explicit stop_on_signals(const cancellation_token& token);
  ~stop_on_signals();
  stop_on_signals(const stop_on_signals&) = delete;
  stop_on_signals& operator=(const stop_on_signals&) = delete;
  /// The signal received (0: none).
  int signal() const;
};

/// A run stopped by SIGINT / SIGTERM with its complete work recorded: exit 128 + signal.
class stopped : public std::runtime_error {
 public:
  stopped(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

}  // namespace ctforge::cli
