// ctforge simulate: exact projections of an analytic phantom (+ noise, + voxelized truth).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "cli.hpp"
#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "core/text_file.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"

namespace ctforge::cli {
namespace {

struct simulate_options {
  std::string phantom;
  std::string geometry;
  std::string output;
  double phantom_size = 128;
  double noise_i0 = 0;
  double noise_sigma = 0;
  std::uint64_t seed = 1;
  std::string truth;
  grid_options grid;
  int supersample = 4;
  execution_options exec;  // --threads; volume phantoms: where the Joseph projector runs
  bool quiet = false;
  CLI::Option* phantom_size_opt = nullptr;
  CLI::Option* noise_i0_opt = nullptr;
  // Voxel phantoms (formats.hpp): any volume file or DICOM series, centred on the isocentre.
  double mu_water = io::default_mu_water_per_mm;
  double phantom_scale = 1;
  CLI::Option* phantom_scale_opt = nullptr;
};

/// --phantom names a volume (file or DICOM directory) rather than shepp-logan or a JSON file.
bool is_voxel_phantom(const std::string& name) {
  return name != "shepp-logan" && !(name.size() >= 5 && name.substr(name.size() - 5) == ".json");
}

/// The volume as attenuation (DICOM HU -> mu with --mu-water; others scaled by
/// --phantom-scale), on its own spacing but centred on the isocentre.
volume load_voxel_phantom(const simulate_options& o) {
  CTFORGE_EXPECTS(
      o.phantom_size_opt->count() == 0,
      "--phantom-size: applies to --phantom shepp-logan only (a volume keeps its spacing)");
  io::volume_read_options r;
  r.mu_water_per_mm = o.mu_water;  // used for DICOM inputs only
  volume v = io::read_volume_any(o.phantom, r);
  for (float& x : v.data) {
    x = static_cast<float>(x * o.phantom_scale);
    CTFORGE_CHECK(std::isfinite(x), o.phantom + ": phantom volume holds non-finite values");
  }
  v.geom = volume_geometry::centered(v.geom.nx, v.geom.ny, v.geom.nz, v.geom.spacing_mm);
  return v;
}

phantom load_phantom(const simulate_options& o) {
  if (o.phantom == "shepp-logan") {
    phantom p = shepp_logan_phantom(o.phantom_size);
    require_representable(p, fmt::format("--phantom-size {:g} (the Shepp-Logan phantom's ellipsoid "
                                         "list)",
                                         o.phantom_size));
    return p;
  }
  CTFORGE_EXPECTS(
      o.phantom_size_opt->count() == 0,
      "--phantom-size: applies to --phantom shepp-logan only (a phantom file is in mm)");
  phantom p = phantom_from_json(
      detail::read_description_file(
          o.phantom, "phantom file (--phantom takes shepp-logan, a phantom JSON or a volume)"),
      o.phantom);
  require_representable(p, o.phantom);
  return p;
}

/// True when the centre of `e` projects onto the detector in at least one view.
bool in_field_of_view(const ellipsoid& e, const geometry& g) {
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const detector_coords d = project_to_detector(g, v, e.center);
    if (d.w > 0 && d.col >= -0.5 && d.col <= static_cast<double>(g.cols) - 0.5 && d.row >= -0.5 &&
        d.row <= static_cast<double>(g.rows) - 0.5)
      return true;
  }
  return false;
}

/// The last guard before writing exact projections: never non-finite values, never all zeros
/// while a non-zero ellipsoid lies in the field of view (usage errors naming the ellipsoid of
/// the phantom file); ellipsoids no ray crosses are named in a warning.
void check_analytic_projections(const simulate_options& o, const phantom& ph, const geometry& g,
                                const projection_stack& proj, const analytic_report& rep) {
  const std::string origin =
      o.phantom == "shepp-logan" ? fmt::format("--phantom-size {:g}", o.phantom_size) : o.phantom;
  const std::int64_t bad =
      detail::first_non_finite(proj.data.data(), static_cast<std::int64_t>(proj.data.size()));
  if (bad >= 0) {
    const std::int64_t v = bad / (proj.rows * proj.cols), r = bad / proj.cols % proj.rows,
                       c = bad % proj.cols;
    // The ellipsoid adding most along that ray.
    const vec3 px = pixel_center(g, v, static_cast<double>(c), static_cast<double>(r));
    const vec3 s = g.views[static_cast<std::size_t>(v)].source;
    const vec3 dir = g.beam == beam_kind::cone ? px - s : s;
    std::size_t worst = 0;
    double most = -1;
    for (std::size_t i = 0; i < ph.ellipsoids.size(); ++i) {
      const double x = std::abs(line_integral(phantom{{ph.ellipsoids[i]}}, px, dir));
      if (x > most) most = x, worst = i;
    }
    throw usage_error(fmt::format(
        "{}: field 'ellipsoids[{}].density': the line integral at view {}, row {}, col {} is {} "
        "(the ellipsoids crossed there add up beyond single precision's largest value, "
        "{:g}); ellipsoid {} adds the most ({:g})",
        origin, worst, v, r, c, proj.data[static_cast<std::size_t>(bad)],
        static_cast<double>(std::numeric_limits<float>::max()), worst, most));
  }
  const bool all_zero =
      std::all_of(proj.data.begin(), proj.data.end(), [](float x) { return x == 0; });
  std::string unseen;
  for (std::size_t i = 0; i < ph.ellipsoids.size(); ++i) {
    const ellipsoid& e = ph.ellipsoids[i];
    if (e.density == 0 || (rep.rays_hit[i] > 0 && !all_zero)) continue;
    const bool inside = in_field_of_view(e, g);
    if (all_zero && inside)
      throw usage_error(fmt::format(
          "{}: field 'ellipsoids[{}].semi_axes': ellipsoid {} (centre [{:g}, {:g}, {:g}] mm, "
          "semi-axes [{:g}, {:g}, {:g}] mm, density {:g} / mm) lies in the field of view but {}: "
          "the projections would be all zero",
          origin, i, i, e.center.x, e.center.y, e.center.z, e.semi_axes.x, e.semi_axes.y,
          e.semi_axes.z, e.density,
          rep.rays_hit[i] > 0 ? "the densities of the ellipsoids it crosses cancel"
                              : fmt::format("no ray through a pixel centre crosses it (it is "
                                            "smaller than the {:g} x {:g} mm pixels)",
                                            g.pixel_u_mm, g.pixel_v_mm)));
    if (rep.rays_hit[i] == 0)
      unseen += fmt::format("{}ellipsoids[{}] ({})", unseen.empty() ? "" : ", ", i,
                            inside ? "between the rays" : "outside the field of view");
  }
  if (!unseen.empty())
    note(o.quiet,
         fmt::format(
             "warning: {}: no ray through a pixel centre crosses {}; {}", origin, unseen,
             all_zero ? "the projections are all zero" : "it leaves no trace in the projections"));
}

void run(const simulate_options& o) {
  const stopwatch total;
  // Validate everything cheap before the long steps.
  require_positive("--phantom-size", o.phantom_size);
  const execution_context ctx = parse_execution_options(o.exec);
  require_distinct_paths({{"--output", o.output}, {"--truth", o.truth}},
                         {{"--phantom", o.phantom == "shepp-logan" ? std::string() : o.phantom},
                          {"--geometry", o.geometry}});
  CTFORGE_EXPECTS(o.supersample >= 1 && o.supersample <= 64,
                  fmt::format("--supersample: must be in 1..64 (got {})", o.supersample));
  const bool noisy = o.noise_i0_opt->count() > 0;
  if (noisy) {
    require_positive("--noise-i0", o.noise_i0);
    require_non_negative("--noise-sigma", o.noise_sigma);
  }
  require_writable_dir("--output", o.output);
  if (!o.truth.empty()) require_writable_dir("--truth", o.truth);

  require_positive("--mu-water", o.mu_water);
  CTFORGE_EXPECTS(std::isfinite(o.phantom_scale), "--phantom-scale: must be finite");
  const bool voxel = is_voxel_phantom(o.phantom);
  CTFORGE_EXPECTS(voxel || o.phantom_scale_opt->count() == 0,
                  "--phantom-scale: applies to volume phantoms only");
  CTFORGE_EXPECTS(voxel || ctx.where != backend::cuda,
                  "--backend cuda: analytic phantoms are projected exactly on the CPU; the GPU "
                  "projects volume phantoms");
  projector_options po;
  static_cast<execution_context&>(po) = ctx;
  std::string notice;
  po.where = voxel ? resolve_backend(ctx.where, &notice, ctx.device) : backend::automatic;
  if (!notice.empty()) note(o.quiet, "note: " + notice);
  const std::optional<volume> voxels =
      voxel ? std::optional<volume>(load_voxel_phantom(o)) : std::nullopt;
  const phantom ph = voxel ? phantom{} : load_phantom(o);
  const geometry g = load_geometry(o.geometry);
  detail::require_memory(
      static_cast<std::uint64_t>(g.view_count()) * static_cast<std::uint64_t>(g.rows) *
          static_cast<std::uint64_t>(g.cols),
      sizeof(float),
      fmt::format("{}: {} views of {} x {} pixels", o.geometry, g.view_count(), g.cols, g.rows),
      "describe fewer views or pixels in the geometry");
  volume_geometry vg;
  if (!o.truth.empty()) {
    CTFORGE_EXPECTS(
        !voxel || (o.grid.size_opt->count() == 0 && o.grid.size_xyz_opt->count() == 0 &&
                   o.grid.spacing_opt->count() == 0 && o.grid.origin_opt->count() == 0),
        "--truth with a volume phantom writes the phantom itself; drop the grid options");
    vg = voxel ? voxels->geom : make_grid(o.grid, g);
  }

  const bool bar = !o.quiet && stderr_is_terminal();
  if (bar)
    fmt::print(stderr, "ctforge: projecting {} onto {} views of {} x {} pixels\n",
               voxel ? fmt::format("a {} x {} x {} voxel phantom", voxels->geom.nx, voxels->geom.ny,
                                   voxels->geom.nz)
                     : fmt::format("{} ellipsoids", ph.ellipsoids.size()),
               g.view_count(), g.cols, g.rows);
  const stopwatch t_proj;
  analytic_report rep;
  projection_stack proj =
      voxel ? forward_project(*voxels, g, po) : project_analytic(ph, g, ctx.threads, &rep);
  const double s_proj = t_proj.seconds();
  if (!voxel) check_analytic_projections(o, ph, g, proj, rep);
  if (voxel && po.where == backend::cuda) {
    const std::string how = describe_last_gpu_call(gpu_call::forward_projection);
    if (!how.empty()) note(o.quiet, how);
  }

  std::string noise_text;
  const stopwatch t_noise;
  if (noisy) {
    noise_options no;
    no.incident_photons = o.noise_i0;
    no.electronic_sigma = o.noise_sigma;
    no.seed = o.seed;
    const noise_report r = add_noise(proj, no);
    noise_text = fmt::format(
        ", noise I0 {:g} sigma {:g} seed {}: {} of {} counts <= 0 clamped to "
        "0.5 photon",
        o.noise_i0, o.noise_sigma, o.seed, r.non_positive, proj.size());
  }
  const double s_noise = t_noise.seconds();
  const stopwatch t_write;
  io::write_projections(o.output, proj, g);
  note(o.quiet,
       fmt::format(
           "simulate: wrote {} ({} views x {} rows x {} cols{}): project {}{}, "
           "write {:.2f} s",
           o.output, proj.views, proj.rows, proj.cols, noise_text,
           voxel ? fmt::format("{:.2f} s ({})", s_proj, po.where == backend::cuda ? "cuda" : "cpu")
                 : fmt::format("{:.2f} s", s_proj),
           noisy ? fmt::format(", noise {:.2f} s", s_noise) : std::string(), t_write.seconds()));

  if (!o.truth.empty()) {
    if (bar)
      fmt::print(stderr, "ctforge: voxelizing onto {} x {} x {} voxels ({}^3 samples each)\n",
                 vg.nx, vg.ny, vg.nz, o.supersample);
    const stopwatch t_vox;
    const volume truth = voxel ? *voxels : voxelize(ph, vg, o.supersample, ctx.threads);
    const double s_vox = t_vox.seconds();
    const stopwatch t_write_truth;
    io::write_volume_any(o.truth, truth);
    note(o.quiet, fmt::format("simulate: wrote {} ({} x {} x {} voxels of {:g} x {:g} x {:g} mm): "
                              "voxelize {:.2f} s, write {:.2f} s",
                              o.truth, vg.nx, vg.ny, vg.nz, vg.spacing_mm[0], vg.spacing_mm[1],
                              vg.spacing_mm[2], s_vox, t_write_truth.seconds()));
  }
  if (!o.truth.empty() || bar)
    note(o.quiet, fmt::format("simulate: done in {:.2f} s", total.seconds()));
}

}  // namespace

runner add_simulate(CLI::App& app) {
  auto o = std::make_shared<simulate_options>();
  CLI::App* sub = app.add_subcommand(
      "simulate",
      "Exact projections (line integrals) of an analytic phantom, with optional noise and a "
      "voxelized ground truth");
  sub->add_option("--phantom", o->phantom,
                  "shepp-logan, a phantom JSON file, or a volume (.h5, .mha, .nrrd, .nii, DICOM "
                  "series directory) projected voxel by voxel (Joseph), centred on the isocentre")
      ->required()
      ->type_name("NAME|FILE")
      ->transform(object_input("--phantom"));
  sub->add_option("--geometry", o->geometry, "Acquisition geometry JSON file")
      ->required()
      ->type_name("FILE")
      ->transform(object_input("--geometry"));
  sub->add_option("-o,--output", o->output, "Output projection file (HDF5)")
      ->required()
      ->type_name("FILE")
      ->check(non_empty_path())
      ->transform(object_output("--output"));
  o->phantom_size_opt =
      sub->add_option("--phantom-size", o->phantom_size,
                      "Edge of the cube the Shepp-Logan phantom is scaled to, in mm")
          ->type_name("MM")
          ->capture_default_str();
  sub->add_option("--mu-water", o->mu_water,
                  "DICOM phantoms: mu = mu_water (1 + HU / 1000), mu_water in 1/mm")
      ->type_name("MU")
      ->capture_default_str();
  o->phantom_scale_opt =
      sub->add_option("--phantom-scale", o->phantom_scale,
                      "Volume phantoms: factor turning the values into 1/mm (after HU -> mu)")
          ->type_name("F")
          ->capture_default_str();
  o->noise_i0_opt = sub->add_option("--noise-i0", o->noise_i0,
                                    "Add Poisson noise: incident photons per pixel (e.g. 1e5)")
                        ->type_name("I0");
  sub->add_option("--noise-sigma", o->noise_sigma,
                  "Std-dev of additive Gaussian electronic noise, in photon counts")
      ->type_name("S")
      ->capture_default_str()
      ->needs(o->noise_i0_opt);
  sub->add_option("--seed", o->seed, "Noise seed (same seed, same noise)")
      ->type_name("N")
      ->capture_default_str()
      ->needs(o->noise_i0_opt);
  CLI::Option* truth = sub->add_option("--truth", o->truth,
                                       "Also write the voxelized phantom (HDF5 volume); grid from "
                                       "the options below, defaults as for `ctforge recon`")
                           ->type_name("FILE")
                           ->check(non_empty_path())
                           ->transform(object_output("--truth"));
  add_grid_options(sub, o->grid);
  for (CLI::Option* opt :
       {o->grid.size_opt, o->grid.size_xyz_opt, o->grid.spacing_opt, o->grid.origin_opt})
    opt->needs(truth);
  sub->add_option("--supersample", o->supersample, "Voxelization: K^3 sample points per voxel")
      ->type_name("K")
      ->capture_default_str()
      ->needs(truth);
  add_execution_options(
      sub, o->exec,
      "volume phantoms: a small value makes the GPU projector take fewer views at a time, then "
      "split the volume into slabs");
  sub->add_flag("--quiet", o->quiet, "Print nothing but errors");
  return [o] { run(*o); };
}

}  // namespace ctforge::cli
