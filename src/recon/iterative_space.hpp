// The iterative space's factories: the CPU space (src/recon/iterative_space_cpu.cpp), the CUDA
// space (src/cuda/iterative_space.cu) and the choice between them. The interface itself,
// detail::iterative_space, is declared in src/core/iterative_space.hpp, below both backends.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/iterative_space.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// The CPU space (src/recon/iterative_space_cpu.cpp).
std::unique_ptr<iterative_space> make_cpu_space(const geometry& g, const volume_geometry& vg,
                                                const space_config& cfg);
/// The CUDA space (src/cuda/iterative_space.cu); usage_error in a build without CUDA.
std::unique_ptr<iterative_space> make_cuda_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg);
/// make_cpu_space or make_cuda_space by cfg.where.
std::unique_ptr<iterative_space> make_space(const geometry& g, const volume_geometry& vg,
                                            const space_config& cfg);

/// The geometry restricted to `views` (in that order): vector views copied, circular orbits
/// keep their angles and offsets for those views. For subsets and work partitions.
geometry select_views(const geometry& g, std::span<const std::int64_t> views);

}  // namespace ctforge::detail
