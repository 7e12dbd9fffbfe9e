// FFTW's planner (fftwf_plan_*, fftwf_destroy_plan) is not thread-safe, and the library plans
// from several floors (the ramp filter in recon, stripe removal and phase retrieval in
// preprocess): every such call in the process holds this one mutex. FFTW itself is not needed
// to include this header.
#pragma once

#include <mutex>

namespace ctforge::detail {

std::mutex& fftw_planner_mutex();

}  // namespace ctforge::detail
