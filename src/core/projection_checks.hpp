// Checks of projection values shared by the CPU paths (src/recon/) and the CUDA backend
// (src/cuda/fdk.cu, which finds the first non-finite value on the device and reports it with
// the same message).
#pragma once

#include <cstdint>

#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Throws usage_error naming view, row and column of the first non-finite value of `p`; returns
/// when there is none. A parallel, vectorised scan (threads = 0: all cores).
void check_finite_values(const projection_view& p, int threads = 0);

/// Throws the usage_error of check_finite_values for the value at linear index `index`.
[[noreturn]] void throw_non_finite(const projection_view& p, std::int64_t index);
/// The same with the value given (projections in device memory are not read on the host).
[[noreturn]] void throw_non_finite(const projection_view& p, std::int64_t index, float value);

}  // namespace ctforge::detail
