// ctforge info / ctforge compare.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cli.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"

namespace ctforge::cli {

runner add_info(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "info",
      "Describe a file: datasets, shapes, value ranges, geometry, voxel grid (ctforge "
      "HDF5, DataExchange, NXtomo, TIFF stacks, MetaImage, NRRD, NIfTI, DICOM)");
  sub->add_option("file", *file, "File or directory (DICOM series, TIFF stack)")
      ->required()
      ->type_name("FILE")
      ->transform(object_input("file"));
  return [file] { fmt::print("{}", with_object_urls(io::describe_any(*file))); };
}

namespace {

struct compare_options {
  std::string a, b;
  double peak = 0;
  CLI::Option* peak_opt = nullptr;
};

void run_compare(const compare_options& o) {
  if (o.peak_opt->count()) require_positive("--peak", o.peak);
  const volume a = io::read_volume_any(o.a);
  const volume b = io::read_volume_any(o.b);
  const auto& ga = a.geom;
  const auto& gb = b.geom;
  CTFORGE_CHECK(ga.nx == gb.nx && ga.ny == gb.ny && ga.nz == gb.nz,
                fmt::format("compare: {} is {} x {} x {} voxels but {} is {} x {} x {} (x, y, z)",
                            o.a, ga.nx, ga.ny, ga.nz, o.b, gb.nx, gb.ny, gb.nz));
  auto differ = [](const std::array<double, 3>& x, const std::array<double, 3>& y) {
    for (int i = 0; i < 3; ++i)
      if (std::abs(x[i] - y[i]) > 1e-6 * std::max({1.0, std::abs(x[i]), std::abs(y[i])}))
        return true;
    return false;
  };
  if (differ(ga.spacing_mm, gb.spacing_mm) || differ(ga.origin_mm, gb.origin_mm))
    fmt::print(stderr,
               "ctforge: note: the voxel grids differ in spacing or origin; comparing voxel "
               "by voxel anyway\n");
  double peak = o.peak;
  if (!o.peak_opt->count()) {
    const auto [lo, hi] = std::minmax_element(b.data.begin(), b.data.end());
    peak = static_cast<double>(*hi) - static_cast<double>(*lo);
  }
  const std::span<const float> sa(a.data), sb(b.data);
  const double mae = mean_abs_error(sa, sb);
  const double rmse = rms_error(sa, sb);
  fmt::print("voxels: {} ({} x {} x {})\n", a.data.size(), ga.nx, ga.ny, ga.nz);
  fmt::print("MAE: {:.6g}\n", mae);
  fmt::print("RMSE: {:.6g}\n", rmse);
  if (peak > 0)
    fmt::print("PSNR: {:.2f} dB (peak {:.6g}{})\n", psnr_db(sa, sb, peak), peak,
               o.peak_opt->count() ? "" : " = range of the reference");
  else
    fmt::print("PSNR: undefined (the reference is constant; pass --peak)\n");
  fmt::print("correlation: {:.6f}\n", correlation(sa, sb));
}

}  // namespace

runner add_compare(CLI::App& app) {
  auto o = std::make_shared<compare_options>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Image-quality figures of volume A against reference volume B (same shape)");
  sub->add_option("a", o->a, "Volume to assess (HDF5)")
      ->required()
      ->type_name("A.h5")
      ->transform(object_input("a"));
  sub->add_option("b", o->b, "Reference volume (HDF5), e.g. the voxelized truth")
      ->required()
      ->type_name("B.h5")
      ->transform(object_input("b"));
  o->peak_opt = sub->add_option("--peak", o->peak,
                                "Peak value for PSNR. Default: max - min of the reference B")
                    ->type_name("P");
  return [o] { run_compare(*o); };
}

}  // namespace ctforge::cli
