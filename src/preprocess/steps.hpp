// What the preprocessing steps share with their GPU versions (src/cuda/preprocess.cu, driven
// from src/recon/preprocess_backend.cpp): the checks of their options, the phase-retrieval grid
// and the errors a step raises, so that both backends refuse and fail alike.
#pragma once

#include <cstdint>
#include <span>

#include "ctforge/preprocess.hpp"
#include "math/phase_filter.hpp"

namespace ctforge::detail {

/// usage_error naming the option for an invalid zinger threshold, size or view window.
void check_outlier_options(const outlier_options& o);

/// The padded grid and filter for views of rows x cols (usage_error for invalid options).
kernels::phase_grid make_phase_grid(std::int64_t rows, std::int64_t cols, const phase_options& o);
/// The error of a filtered transmission that is not positive and finite.
[[noreturn]] void throw_phase_failure(std::int64_t view, std::int64_t row, std::int64_t col,
                                      float value);

/// Phase retrieval's options in the sample plane of `o` (pitch and distance divided by the
/// magnification); usage_error when set_detector has not given the pitch.
phase_options phase_in_sample_plane(const preprocess_options& o);

/// Every step of `opt` on the CPU, in order (what preprocess() runs without a GPU).
preprocess_report preprocess_cpu(projections_ref p, const preprocess_options& opt);

}  // namespace ctforge::detail
