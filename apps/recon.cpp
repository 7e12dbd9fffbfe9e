// ctforge recon: FDK / FBP reconstruction of a projection file.
#include <fmt/format.h>

#include <memory>

#include "cli.hpp"
#include "ctforge/error.hpp"
#include "ctforge/io.hpp"
#include "ctforge/recon.hpp"

namespace ctforge::cli {
namespace {

struct recon_cli_options {
  std::string input;
  std::string output;
  std::string algorithm;  // empty: by beam kind
  grid_options grid;
  std::string filter = "ram-lak";
  double cutoff = 1.0;
  std::string geometry;
  std::string backend = "auto";
  int device = 0;
  int threads = 0;
  std::string preview;
  bool quiet = false;
  bool reference = false;
};

void run(const recon_cli_options& o) {
  const stopwatch total;
  recon_options ro;
  ro.filter = parse_filter(o.filter);
  CTFORGE_EXPECTS(std::isfinite(o.cutoff) && o.cutoff > 0 && o.cutoff <= 1,
                  fmt::format("--cutoff: must be in (0, 1] (a fraction of Nyquist; got {})", o.cutoff));
  ro.cutoff = o.cutoff;
  require_non_negative("--threads", o.threads);
  require_non_negative("--device", o.device);
  ro.threads = o.threads;
  ro.device = o.device;
  ro.reference = o.reference;
  ro.where = parse_backend(o.backend);
  CTFORGE_EXPECTS(!(o.reference && ro.where == backend::cuda),
                  "--reference: the reference path runs on the CPU; drop --backend cuda");
  std::string notice;
  const backend where = o.reference ? backend::cpu : resolve_backend(ro.where, &notice);
  require_writable_dir("--output", o.output);
  if (!o.preview.empty()) require_writable_dir("--preview", o.preview);

  const stopwatch t_read;
  io::projection_file in = io::read_projections(o.input);
  const projection_stack& proj = in.projections;
  geometry g;
  if (!o.geometry.empty()) {
    g = load_geometry(o.geometry);
    CTFORGE_CHECK(g.view_count() == proj.views && g.rows == proj.rows && g.cols == proj.cols,
                  fmt::format("--geometry {}: {} views of {} rows x {} cols, but {} holds "
                              "projections [{}][{}][{}] (views, rows, cols)",
                              o.geometry, g.view_count(), g.rows, g.cols, o.input, proj.views,
                              proj.rows, proj.cols));
  } else {
    CTFORGE_EXPECTS(in.geom.has_value(),
                    fmt::format("{}: no /geometry dataset; pass --geometry FILE", o.input));
    g = *in.geom;
  }
  ro.algo = o.algorithm.empty() ? (g.beam == beam_kind::cone ? algorithm::fdk : algorithm::fbp)
                                : parse_algorithm(o.algorithm);
  const volume_geometry vg = make_grid(o.grid, g);
  const double s_read = t_read.seconds();

  if (!notice.empty() && ro.where == backend::automatic) note(o.quiet, "note: " + notice);
  const bool bar_on = !o.quiet && stderr_is_terminal();
  const std::string algo_name = ro.algo == algorithm::fdk ? "fdk" : "fbp";
  const std::string where_name = where == backend::cuda ? "cuda" : (o.reference ? "cpu reference" : "cpu");
  progress_bar bar(fmt::format("{} ({}) {}x{}x{}", algo_name, where_name, vg.nx, vg.ny, vg.nz), bar_on);
  if (bar_on) ro.progress = [&bar](double f) { bar.update(f); };
  const stopwatch t_recon;
  const volume vol = reconstruct(proj, g, vg, ro);
  const double s_recon = t_recon.seconds();
  bar.done();

  const stopwatch t_write;
  io::write_volume(o.output, vol);
  if (!o.preview.empty()) io::write_preview_png(o.preview, vol);
  note(o.quiet,
       fmt::format("recon: wrote {}{} ({} x {} x {} voxels of {:g} x {:g} x {:g} mm; {} {} "
                   "filter {} cutoff {:g}): read {:.2f} s, reconstruct {:.2f} s, write {:.2f} s, "
                   "total {:.2f} s",
                   o.output, o.preview.empty() ? "" : " and " + o.preview, vg.nx, vg.ny, vg.nz,
                   vg.spacing_mm[0], vg.spacing_mm[1], vg.spacing_mm[2], algo_name, where_name,
                   to_string(ro.filter), ro.cutoff, s_read, s_recon, t_write.seconds(),
                   total.seconds()));
}

}  // namespace

runner add_recon(CLI::App& app) {
  auto o = std::make_shared<recon_cli_options>();
  CLI::App* sub = app.add_subcommand("recon", "Reconstruct a volume from a projection file (FDK / FBP)");
  sub->add_option("input", o->input, "Projection file (HDF5: /projections, /geometry)")
      ->required()
      ->type_name("PROJ.h5");
  sub->add_option("-o,--output", o->output, "Output volume file (HDF5)")
      ->required()
      ->type_name("FILE");
  sub->add_option("--algorithm", o->algorithm,
                  "fdk (circular cone / fan beam) or fbp (circular parallel beam). Default: by "
                  "the geometry's beam")
      ->check(CLI::IsMember({"fdk", "fbp"}))
      ->type_name("NAME");
  add_grid_options(sub, o->grid);
  sub->add_option("--filter", o->filter, "Ramp filter window")
      ->check(CLI::IsMember({"ram-lak", "shepp-logan", "cosine", "hamming", "hann"}))
      ->type_name("NAME")
      ->capture_default_str();
  sub->add_option("--cutoff", o->cutoff, "Filter cut-off as a fraction of Nyquist, in (0, 1]")
      ->type_name("F")
      ->capture_default_str();
  sub->add_option("--geometry", o->geometry,
                  "Geometry JSON file to use instead of the file's /geometry")
      ->type_name("FILE");
  sub->add_option("--backend", o->backend,
                  "auto (CUDA when a usable device exists, else CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->type_name("NAME")
      ->capture_default_str();
  sub->add_option("--device", o->device, "CUDA device ordinal")->type_name("N")->capture_default_str();
  sub->add_option("--threads", o->threads, "CPU threads (0 = all cores)")
      ->type_name("N")
      ->capture_default_str();
  sub->add_option("--preview", o->preview,
                  "Also write a PNG of the three central slices (axial, coronal, sagittal)")
      ->type_name("FILE.png");
  sub->add_flag("--quiet", o->quiet, "Print nothing but errors");
  sub->add_flag("--reference", o->reference,
                "Use the slow double-precision CPU reference path (for validation)");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
