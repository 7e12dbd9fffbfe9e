// make_cuda_space in a build without the CUDA backend: a usage_error saying so (the CUDA
// space is src/kernels/iterative_space.cu).
#include "ctforge/error.hpp"
#include "recon/iterative_space.hpp"

#if !defined(CTFORGE_WITH_CUDA)
namespace ctforge::detail {

std::unique_ptr<iterative_space> make_cuda_space(const geometry&, const volume_geometry&,
                                                 const space_config&) {
  throw usage_error(
      "the CUDA backend is not available: this build of ctforge has no CUDA support (use the "
      "CPU backend)");
}

}  // namespace ctforge::detail
#endif
