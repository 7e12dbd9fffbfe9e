// Simulates a small cone-beam scan of the Shepp-Logan phantom, reconstructs it with FDK and
// prints the PSNR against the voxelized phantom; exits 1 below 20 dB.
#include <cstdio>
#include <span>

#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"

int main() {
  using namespace ctforge;
  const geometry g = make_cone_geometry(64, 64, 1.0, 1.0, 300, 600,
                                        angle_range(0, deg_to_rad(2), 180));
  const phantom ph = shepp_logan_phantom(28);
  const projection_stack p = project_analytic(ph, g);
  const volume_geometry vg = default_grid(g, {.size = std::array<std::int64_t, 3>{48, 48, 48}});
  recon_options opt;
  opt.where = backend::cpu;
  const volume v = reconstruct(p, g, vg, opt);  // a projection_stack is read as a view
  const volume truth = voxelize(ph, vg);
  const double psnr = psnr_db(v.data, truth.data, 0.1);
  std::printf("consumer: FDK PSNR %.2f dB\n", psnr);
  return psnr > 20 ? 0 : 1;
}
