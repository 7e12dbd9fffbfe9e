// ctforge center: the rotation-axis column of a projection file, with its confidence, and a
// labelled montage of one slice per candidate column for checking it by eye.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cli.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"

namespace ctforge::cli {
namespace {

struct center_cli_options {
  std::string input, output, range;
  std::int64_t row = -1;  // -1: not given (the middle row)
  std::int64_t size = 0;
  bool quiet = false;
  projection_input_options read;
  execution_options exec;  // --threads
};

/// The candidate columns of --range A:B:STEP (A, A + STEP, ... up to B inclusive, within a
/// thousandth of a step), each on the detector of `cols` columns.
std::vector<double> parse_range(const std::string& text, std::int64_t cols) {
  std::vector<double> v;
  std::string part;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = text.find(':', start);
    part = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    CTFORGE_EXPECTS(!part.empty() && end == part.c_str() + part.size() && std::isfinite(x),
                    fmt::format("--range: expected A:B:STEP (three numbers, e.g. 290:300:0.5), "
                                "got '{}'",
                                text));
    v.push_back(x);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  CTFORGE_EXPECTS(v.size() == 3, fmt::format("--range: expected A:B:STEP (three numbers, e.g. "
                                             "290:300:0.5), got '{}'",
                                             text));
  const double a = v[0], b = v[1], step = v[2];
  CTFORGE_EXPECTS(step > 0, fmt::format("--range: STEP must be > 0 (got {})", step));
  CTFORGE_EXPECTS(b >= a, fmt::format("--range: empty range, B {} is below A {}", b, a));
  const double n = std::floor((b - a) / step + 1e-3) + 1;
  CTFORGE_EXPECTS(n <= static_cast<double>(max_center_candidates),
                  fmt::format("--range: {:.0f} candidates; at most {} (use a larger STEP)", n,
                              max_center_candidates));
  std::vector<double> out;
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(n); ++k) {
    const double c = a + static_cast<double>(k) * step;
    CTFORGE_EXPECTS(
        c >= -0.5 && c <= static_cast<double>(cols) - 0.5,
        fmt::format("--range: column {} is off the detector (columns 0 .. {})", c, cols - 1));
    out.push_back(c);
  }
  return out;
}

/// Detector rows [r0, r1) of the file, read with the options.
io::loaded_projections read_band(const center_cli_options& o,
                                 const io::projection_read_options& read, std::int64_t rows,
                                 std::int64_t r0, std::int64_t r1) {
  io::loaded_projections in =
      io::read_projections_any(o.input, io::row_band_options(read, rows, r0, r1));
  if (!in.warnings.empty()) note(o.quiet, "note: " + in.warnings);
  return in;
}

/// Prints the estimate (stdout) and, when its confidence is low, a warning (stderr).
void report(const center_estimate& e, const geometry& g) {
  fmt::print(
      "center of rotation: column {:.2f} (confidence {:.2f}, {} method; opposite-view "
      "registration {:.2f}; detector middle {:.1f})\n",
      e.column, e.confidence, e.method, e.registration_column,
      0.5 * static_cast<double>(g.cols - 1));
  std::fflush(stdout);
  if (e.confidence < low_center_confidence)
    fmt::print(stderr,
               "ctforge: warning: the rotation centre {:.2f} has low confidence ({:.2f} < {}): "
               "check it with `ctforge center IN --range A:B:STEP -o montage.png`\n",
               e.column, e.confidence, low_center_confidence);
}

void run(const center_cli_options& o) {
  const int threads = parse_execution_options(o.exec).threads;
  CTFORGE_EXPECTS(o.range.empty() || !o.output.empty(),
                  "--range: needs -o / --output, the montage to write");
  CTFORGE_EXPECTS(o.size >= 0 && o.size <= 4096,
                  fmt::format("--size: must be in 0 .. 4096 (got {})", o.size));
  std::vector<named_path> inputs = projection_input_paths(o.read);
  inputs.insert(inputs.begin(), {"input", o.input});
  require_distinct_paths({{"--output", o.output}}, inputs);
  if (!o.output.empty()) require_writable_dir("--output", o.output);
  const io::projection_read_options read = projection_read_options_of(o.read);
  const geometry whole = io::read_projection_geometry(o.input, read);
  CTFORGE_EXPECTS(
      o.row >= -1 && o.row < whole.rows,
      fmt::format("--row: {} is off the detector (rows 0 .. {})", o.row, whole.rows - 1));
  const std::int64_t row = o.row >= 0 ? o.row : whole.rows / 2;
  std::vector<double> columns;
  if (!o.range.empty()) {
    columns = parse_range(o.range, whole.cols);
  } else {
    // The estimate from the given row, or from up to 32 rows about the middle.
    const std::int64_t half = std::min<std::int64_t>(16, (whole.rows + 1) / 2);
    const std::int64_t r0 = o.row >= 0 ? row : std::max<std::int64_t>(0, row - half);
    const std::int64_t r1 = o.row >= 0 ? row + 1 : std::min(whole.rows, row + half);
    const io::loaded_projections in = read_band(o, read, whole.rows, r0, r1);
    center_search_options so;
    so.threads = threads;
    const center_estimate e = find_center_of_rotation(in.projections, *in.geom, so);
    report(e, whole);
    if (o.output.empty()) return;
    // The montage around the estimate: 21 candidates 0.5 px apart, those on the detector.
    for (int k = -10; k <= 10; ++k) {
      const double c = std::round(2 * e.column) / 2 + 0.5 * k;
      if (c >= -0.5 && c <= static_cast<double>(whole.cols) - 0.5) columns.push_back(c);
    }
  }
  // Parallel beams: the row alone; fan / cone beams: the rows within 16 of it.
  const std::int64_t reach = whole.beam == beam_kind::parallel ? 0 : 16;
  const std::int64_t r0 = std::max<std::int64_t>(0, row - reach);
  const std::int64_t r1 = std::min(whole.rows, row + reach + 1);
  const io::loaded_projections band = read_band(o, read, whole.rows, r0, r1);
  const volume slices = reconstruct_center_candidates(band.projections, *band.geom, row - r0,
                                                      columns, o.size, threads);
  io::write_center_montage(o.output, slices, columns);
  const auto [across, down] = io::montage_grid(static_cast<std::int64_t>(columns.size()));
  note(o.quiet, fmt::format("wrote {}: {} slices of row {} ({} x {} pixels each, {} x {} tiles), "
                            "columns {:.2f} .. {:.2f}",
                            o.output, columns.size(), row, slices.geom.nx, slices.geom.ny, across,
                            down, columns.front(), columns.back()));
}

}  // namespace

runner add_center(CLI::App& app) {
  auto o = std::make_shared<center_cli_options>();
  CLI::App* sub = app.add_subcommand(
      "center",
      "Rotation-axis column of a projection file with its confidence; with --range, a PNG montage "
      "of one slice per candidate column, labelled, for checking it by eye");
  sub->add_option("input", o->input, "Projection file (any format recon reads)")
      ->required()
      ->type_name("IN")
      ->transform(object_input("input"));
  sub->add_option("--range", o->range,
                  "Candidate columns A, A + STEP, ... up to B (0-based detector columns; at most "
                  "200 candidates); needs -o")
      ->type_name("A:B:STEP");
  sub->add_option("-o,--output", o->output,
                  "Montage PNG (without --range: 21 candidates 0.5 px apart about the estimate)")
      ->type_name("FILE.png")
      ->check(non_empty_path())
      ->transform(object_output("--output"));
  sub->add_option("--row", o->row, "Detector row to reconstruct (default: the middle row)")
      ->type_name("R");
  sub->add_option("--size", o->size,
                  "Tile size in pixels (the slice grid covers the field of view; default "
                  "min(cols, 512))")
      ->type_name("N");
  add_projection_input_options(sub, o->read);
  add_execution_options(sub, o->exec);
  sub->add_flag("--quiet", o->quiet, "Print only the estimate and errors");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
