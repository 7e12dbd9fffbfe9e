// FDK / FBP pipeline on the GPU (stub while the pipeline is written).
#include "ctforge/error.hpp"
#include "recon/cuda_dispatch.hpp"

namespace ctforge::detail {

volume cuda_reconstruct(const projection_stack&, const geometry&, const volume_geometry&,
                        const recon_options&, const cuda_options&) {
  CTFORGE_FAIL("cuda_reconstruct: the CUDA backend is not implemented yet");
}

projection_stack cuda_forward_project(const volume&, const geometry&, const cuda_options&) {
  CTFORGE_FAIL("cuda_forward_project: the CUDA backend is not implemented yet");
}

volume cuda_back_project(const projection_stack&, const geometry&, const volume_geometry&,
                         const cuda_options&) {
  CTFORGE_FAIL("cuda_back_project: the CUDA backend is not implemented yet");
}

}  // namespace ctforge::detail
