// ctforge convert: between file formats (see include/ctforge/formats.hpp).
// ctforge preprocess: a projection scan cleaned (the steps of include/ctforge/preprocess.hpp,
// optionally a 360-degree offset-axis stitch) and written as line integrals, on the CPU or
// the GPU; the same route as convert with the steps, with --backend / --threads of its own.
//  * volumes: .h5, .mha/.mhd, .nrrd/.nhdr, .nii/.nii.gz, DICOM series (directory) or file;
//  * projections: ctforge .h5, DataExchange / NXtomo .h5, TIFF stacks -> ctforge .h5 or a TIFF
//    stack (directory of float32 line integrals plus geometry.json);
//  * geometries: JSON -> RTK XML (.xml) or ASTRA vectors (.txt / .vec); RTK XML or ASTRA
//    vectors -> JSON with --detector and --pixel (and --beam for ASTRA).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "ctforge/preprocess.hpp"

namespace ctforge::cli {
namespace {

namespace fs = std::filesystem;

struct convert_options {
  std::string input, output;
  double mu_water = io::default_mu_water_per_mm;
  CLI::Option* mu_water_opt = nullptr;
  bool hu = false;
  std::string description = "ctforge conversion";
  // projections
  projection_input_options read;
  std::string views, rows, cols;
  preprocess_cli_options prep;  // --zingers, --rings, ...
  std::string stitch_360;       // "", "auto" or the axis column
  // geometry files
  std::string detector, pixel, beam = "cone";
  bool quiet = false;
  // ctforge preprocess: where the steps run (convert: automatic, all cores)
  execution_options exec;
  const char* verb = "convert";
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
bool ends_with(const std::string& s, const char* e) {
  return lower(s).ends_with(e);
}

/// "first:count" or "first" (count to the end).
io::index_range parse_range(const std::string& option, const std::string& text) {
  io::index_range r;
  if (text.empty()) return r;
  const auto colon = text.find(':');
  const auto v = parse_ints(
      option,
      colon == std::string::npos ? text : text.substr(0, colon) + "," + text.substr(colon + 1),
      {1, 2});
  r.first = v[0];
  if (v.size() == 2) r.count = v[1];
  return r;
}

void convert_geometry(const convert_options& o) {
  CTFORGE_EXPECTS(ends_with(o.output, ".json") || ends_with(o.output, ".xml") ||
                      ends_with(o.output, ".txt") || ends_with(o.output, ".vec"),
                  fmt::format("output {}: a geometry is written as .json (ctforge), .xml (RTK) or "
                              ".txt / .vec (ASTRA vectors)",
                              o.output));
  geometry g;
  if (ends_with(o.input, ".json")) {
    g = load_geometry(o.input);
  } else {
    const bool rtk = ends_with(o.input, ".xml");
    CTFORGE_EXPECTS(
        !o.detector.empty() && (!rtk || !o.pixel.empty()),
        fmt::format("{}: {} geometries do not record the detector size: give --detector "
                    "COLS,ROWS{}",
                    o.input, rtk ? "RTK" : "ASTRA", rtk ? " and --pixel DU[,DV]" : ""));
    const auto det = parse_ints("--detector", o.detector, {2});
    if (rtk) {
      const auto px = parse_doubles("--pixel", o.pixel, {1, 2});
      g = io::read_rtk_geometry(o.input, det[0], det[1], px[0], px.size() == 2 ? px[1] : px[0]);
    } else
      g = io::read_astra_vectors(
          o.input, o.beam == "parallel" ? beam_kind::parallel : beam_kind::cone, det[0], det[1]);
  }
  if (ends_with(o.output, ".json")) {
    const std::string text = geometry_to_json(g) + "\n";
    io::write_atomically(o.output, [&](const std::string& tmp) {
      io::write_file_bytes(tmp, text.data(), text.size(), o.output);
    });
  } else if (ends_with(o.output, ".xml")) {
    io::write_rtk_geometry(o.output, g);
  } else {
    io::write_astra_vectors(o.output, g);
  }
  note(o.quiet, fmt::format("convert: wrote {} ({} geometry, {} views)", o.output, g.type_name(),
                            g.view_count()));
}

/// --stitch-360: the 360-degree offset-axis scan `in` becomes a 180-degree scan of about twice
/// the width (stitch_360), its axis the given column or find_center_360's estimate.
void stitch(const convert_options& o, io::loaded_projections& in, const execution_context& ctx) {
  stitch_options so;
  if (o.stitch_360 == "auto") {
    center_360_options co;
    co.threads = ctx.threads;
    const center_360_estimate e = find_center_360(in.projections, co);
    so.center = e.center;
    note(o.quiet, fmt::format("{}: 360-degree axis at column {:.2f} ({} side, overlap {:.0f} "
                              "pixels, confidence {:.2f})",
                              o.verb, e.center, to_string(e.side), e.overlap, e.confidence));
  } else {
    const char* end = o.stitch_360.data() + o.stitch_360.size();
    const auto [ptr, ec] = std::from_chars(o.stitch_360.data(), end, so.center);
    CTFORGE_EXPECTS(
        ec == std::errc{} && ptr == end,
        fmt::format("--stitch-360: expected a detector column or 'auto' (got '{}')", o.stitch_360));
  }
  stitched_scan out = stitch_360(in.projections, *in.geom, so);
  in.projections = std::move(out.projections);
  in.geom = std::move(out.geom);
  in.geometry_json = geometry_to_json(*in.geom);
  note(o.quiet, fmt::format("{}: stitched into {} views of {} columns", o.verb,
                            in.projections.views, in.projections.cols));
}

void convert_projections(const convert_options& o, const execution_context& ctx) {
  io::projection_read_options r = projection_read_options_of(o.read);
  r.select.views = parse_range("--views", o.views);
  r.select.rows = parse_range("--rows", o.rows);
  r.select.cols = parse_range("--cols", o.cols);
  preprocess_options prep = preprocess_options_of(o.prep, ctx);
  io::loaded_projections in = io::read_projections_any(o.input, r);
  if (!in.warnings.empty()) note(o.quiet, "note: " + in.warnings);
  if (!prep.empty()) {
    set_detector(prep, *in.geom);
    const preprocess_report done = preprocess(in.projections, prep);
    note(o.quiet,
         fmt::format(
             "{}: cleaned: {}{}", o.verb, describe_preprocessing(prep),
             prep.zingers ? fmt::format("; {} zingers replaced", done.zingers_replaced) : ""));
  }
  if (!o.stitch_360.empty()) stitch(o, in, ctx);
  const auto& p = in.projections;
  if (ends_with(o.output, ".h5") || ends_with(o.output, ".hdf5")) {
    io::write_projections(o.output, p, *in.geom);
  } else if (io::is_zarr_path(o.output)) {
    io::write_zarr_projections(o.output, p, *in.geom);
  } else {
    io::write_tiff_stack(o.output, p, "proj", in.geometry_json + "\n");
  }
  note(
      o.quiet,
      fmt::format("{}: wrote {} ({} projections -> {} views x {} rows x {} cols of line integrals)",
                  o.verb, o.output, in.format, p.views, p.rows, p.cols));
}

void convert_volume(const convert_options& o) {
  const bool dicom_in = io::volume_format_of(o.input) == io::volume_format::dicom;
  const bool dicom_out = io::volume_format_of(o.output) == io::volume_format::dicom;
  io::volume_read_options r;
  if (o.mu_water_opt->count()) r.mu_water_per_mm = o.mu_water;
  const volume v = io::read_volume_any(o.input, r);
  io::volume_write_options w;
  w.mu_water_per_mm = o.mu_water;
  // HU in: a DICOM input read without --mu-water, or --hu for other inputs.
  w.values_are_hu = o.hu || (dicom_in && !o.mu_water_opt->count());
  w.series_description = o.description;
  io::write_volume_any(o.output, v, w);
  std::string values = w.values_are_hu ? "HU" : "attenuation (1/mm)";
  if (dicom_out && !w.values_are_hu)
    values += fmt::format(" -> HU with mu_water {:g} /mm", w.mu_water_per_mm);
  note(o.quiet, fmt::format("convert: wrote {} ({} -> {}, {} x {} x {} voxels, values {})",
                            o.output, io::to_string(io::volume_format_of(o.input)),
                            io::to_string(io::volume_format_of(o.output)), v.geom.nx, v.geom.ny,
                            v.geom.nz, values));
}

void run(const convert_options& o) {
  std::vector<named_path> inputs = projection_input_paths(o.read);
  inputs.insert(inputs.begin(), {"input", o.input});
  require_distinct_paths({{"output", o.output}}, inputs);
  require_positive("--mu-water", o.mu_water);
  check_projection_input(o.read);
  std::string kind = io::content_kind(o.input);
  // A Zarr array other tools wrote says nothing of what it holds: with a geometry or an angle
  // list it is projections.
  if (kind == "volume" && io::is_zarr_path(o.input) &&
      (!o.read.geometry.empty() || !o.read.angles.empty()))
    kind = "projections";
  // Files must be named as files; TIFF stacks and DICOM series are directories.
  const bool dir_out =
      kind == "projections"
          ? !(ends_with(o.output, ".h5") || ends_with(o.output, ".hdf5"))
          : kind != "geometry" && (io::volume_format_of(o.output) == io::volume_format::dicom ||
                                   io::volume_format_of(o.output) == io::volume_format::zarr);
  if (dir_out)
    require_output_directory("output", o.output);
  else
    require_writable_dir("output", o.output);
  for (const CLI::Option* given : o.prep.options)
    CTFORGE_EXPECTS(
        kind == "projections" || given->count() == 0,
        fmt::format("{}: applies to projections; {} is a {}", given->get_name(), o.input, kind));
  if (kind == "geometry") return convert_geometry(o);
  if (kind == "projections") {
    CTFORGE_EXPECTS(!o.hu && !o.mu_water_opt->count(),
                    "--hu / --mu-water: apply to volumes, not projections");
    return convert_projections(o, execution_context{});
  }
  convert_volume(o);
}

/// --views, --rows, --cols (convert, preprocess), in the projection input group.
void add_selection_options(CLI::Option_group* read, convert_options& o) {
  read->add_option("--views", o.views, "Views to read: FIRST[:COUNT]")->type_name("RANGE");
  read->add_option("--rows", o.rows, "Detector rows to read: FIRST[:COUNT]")->type_name("RANGE");
  read->add_option("--cols", o.cols, "Detector columns to read: FIRST[:COUNT]")->type_name("RANGE");
}

/// --stitch-360 (convert, preprocess), in the preprocessing group: it runs after the steps.
void add_stitch_option(CLI::Option_group* g, std::string& value) {
  g->add_option("--stitch-360", value,
                "A 360-degree parallel-beam scan with the rotation axis near one edge (half "
                "acquisition): stitch each view with the mirrored view half a turn later into "
                "a 180-degree scan of about twice the width, the axis at this detector column "
                "(0-based) or 'auto' (estimated from the data), after the cleaning steps")
      ->type_name("COL|auto");
}

/// ctforge preprocess: the input must be projections and at least one step must be asked for
/// (without one, convert is the command).
void run_preprocess(const convert_options& o) {
  std::vector<named_path> inputs = projection_input_paths(o.read);
  inputs.insert(inputs.begin(), {"input", o.input});
  require_distinct_paths({{"-o", o.output}}, inputs);
  check_projection_input(o.read);
  const execution_context ctx = parse_execution_options(o.exec);
  CTFORGE_EXPECTS(o.exec.interpolation == "exact",
                  "--gpu-interpolation: applies to projectors, not to the cleaning steps");
  if (ends_with(o.output, ".h5") || ends_with(o.output, ".hdf5"))
    require_writable_dir("-o", o.output);
  else
    require_output_directory("-o", o.output);
  const std::string kind = io::content_kind(o.input);
  CTFORGE_EXPECTS(kind == "projections",
                  fmt::format("{}: preprocess cleans projections; this is a {} (ctforge convert "
                              "converts it)",
                              o.input, kind));
  bool any = !o.stitch_360.empty();
  for (const CLI::Option* given : o.prep.options) any = any || given->count() > 0;
  CTFORGE_EXPECTS(any,
                  "preprocess: no step given (--zingers, --rings, --phase, --beam-hardening or "
                  "--stitch-360); ctforge convert writes the projections without cleaning");
  convert_projections(o, ctx);
}

}  // namespace

runner add_preprocess(CLI::App& app) {
  auto o = std::make_shared<convert_options>();
  o->verb = "preprocess";
  CLI::App* sub = app.add_subcommand(
      "preprocess",
      "Clean a projection scan (zingers, rings, phase retrieval, beam hardening, 360-degree "
      "offset-axis stitching, in that order) and write it as line integrals: a ctforge .h5 "
      "file or a TIFF stack directory, readable by recon");
  sub->add_option("input", o->input,
                  "Projections: ctforge/DataExchange/NXtomo .h5, a TIFF stack directory or a "
                  "glob in quotes")
      ->required()
      ->type_name("IN")
      ->transform(object_input("input"));
  CLI::Option_group* out = sub->add_option_group(k_output_group, "Where the result goes");
  out->add_option("-o,--output", o->output,
                  "Cleaned line integrals: .h5 (ctforge schema) or a directory (TIFF stack with "
                  "geometry.json)")
      ->required()
      ->type_name("OUT")
      ->check(non_empty_path())
      ->transform(object_output("output"));
  out->add_flag("--quiet", o->quiet, "Print nothing but errors");
  add_selection_options(add_projection_input_options(sub, o->read), *o);
  CLI::Option_group* prep = add_preprocess_options(sub, o->prep);
  add_stitch_option(prep, o->stitch_360);
  add_execution_options(sub, o->exec,
                        "the steps on the GPU take fewer views (zingers, phase) or detector rows "
                        "(rings) at a time");
  return [o] { run_preprocess(*o); };
}

runner add_convert(CLI::App& app) {
  auto o = std::make_shared<convert_options>();
  CLI::App* sub = app.add_subcommand(
      "convert",
      "Convert between formats (by extension): volumes (.h5, .mha/.mhd, .nrrd, .nii/.nii.gz, DICOM "
      "directory), projections (ctforge/DataExchange/NXtomo .h5, TIFF stacks -> .h5 or a TIFF "
      "directory), geometries (.json <-> RTK .xml / ASTRA .txt)");
  sub->add_option("input", o->input,
                  "Input file or directory (DICOM series, TIFF stack, or a glob in quotes)")
      ->required()
      ->type_name("IN")
      ->transform(object_input("input"));
  sub->add_option("output", o->output, "Output file or directory (DICOM series / TIFF stack)")
      ->required()
      ->type_name("OUT")
      ->check(non_empty_path())
      ->transform(object_output("output"));
  o->mu_water_opt =
      sub->add_option("--mu-water", o->mu_water,
                      "Water attenuation (1/mm) for HU <-> mu: DICOM input is converted to mu, "
                      "volumes written as DICOM are converted to HU with it")
          ->type_name("MU")
          ->capture_default_str();
  sub->add_flag("--hu", o->hu, "The input volume holds HU already (written to DICOM unchanged)");
  sub->add_option("--description", o->description, "DICOM Series Description")
      ->type_name("TEXT")
      ->capture_default_str();
  add_selection_options(add_projection_input_options(sub, o->read), *o);
  add_stitch_option(add_preprocess_options(sub, o->prep), o->stitch_360);
  sub->add_option("--detector", o->detector, "Geometry import: detector COLS,ROWS")
      ->type_name("C,R");
  sub->add_option("--pixel", o->pixel, "Geometry import: pixel pitch DU[,DV] in mm")
      ->type_name("MM");
  sub->add_option("--beam", o->beam, "ASTRA import: cone (cone_vec) or parallel (parallel3d_vec)")
      ->check(CLI::IsMember({"cone", "parallel"}))
      ->capture_default_str();
  sub->add_flag("--quiet", o->quiet, "Print nothing but errors");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
