// Reconstruction API: one entry point for every algorithm and backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ctforge/backend.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

enum class algorithm { fdk, fbp };
enum class filter_window { ram_lak, shepp_logan, cosine, hamming, hann };

algorithm parse_algorithm(std::string_view name);   ///< "fdk", "fbp"
filter_window parse_filter(std::string_view name);  ///< "ram-lak", "shepp-logan", ...
std::string to_string(filter_window w);

struct recon_options {
  algorithm algo = algorithm::fdk;
  filter_window filter = filter_window::ram_lak;
  double cutoff = 1.0;  ///< window cut-off as a fraction of Nyquist, (0, 1]
  backend where = backend::automatic;
  int threads = 0;  ///< CPU threads, 0 = all
  int device = 0;   ///< CUDA device ordinal
  /// Upper bound on GPU memory the CUDA backend may use (bytes); 0 = automatic (free memory
  /// less a safety margin). Forwarded into detail::cuda_options::memory_limit_bytes.
  std::int64_t gpu_memory_limit_bytes = 0;
  /// CUDA backend: interpolate the detector with the texture unit (one fetch per sample;
  /// faster, but its 8-bit fractional weights put results ~1e-4 of the peak from the CPU's)
  /// instead of the default exact fp32 bilinear arithmetic of the CPU path (~1e-6).
  bool gpu_hardware_interpolation = false;
  /// Reference CPU path (simple loops, double accumulation); slow, for tests.
  bool reference = false;
  /// Called with the fraction done in [0, 1]; may be empty. Called from the calling thread.
  std::function<void(double)> progress;
};

/// Reconstructs `vg` from line integrals `proj` (views x rows x cols, matching `g`).
/// FDK requires a circular cone geometry (rows = 1 is fan beam), FBP a circular parallel one.
/// Full scans (>= 360 deg) get weight 1/2 per redundant ray; short scans with at least
/// 180 deg + fan angle get Parker weights. Throws usage_error on mismatched input.
volume reconstruct(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                   const recon_options& opt);

}  // namespace ctforge
