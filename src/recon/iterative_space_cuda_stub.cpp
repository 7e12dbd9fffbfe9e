// TEMPORARY: delete this file when src/kernels/iterative_space.cu (the CUDA iterative space)
// is merged. Until then a CUDA build reaches make_cuda_space here and is told the space does
// not exist yet; builds without CUDA get the usage error of src/recon/iterative_space_cpu.cpp.
#if defined(CTFORGE_WITH_CUDA)
#include "ctforge/error.hpp"
#include "recon/iterative_space.hpp"

namespace ctforge::detail {

std::unique_ptr<iterative_space> make_cuda_space(const geometry&, const volume_geometry&,
                                                 const space_config&) {
  throw error("CUDA iterative space not built");
}

}  // namespace ctforge::detail
#endif
