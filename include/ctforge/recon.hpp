// Reconstruction API: one entry point for every algorithm and backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

enum class algorithm { fdk, fbp };
enum class backend { automatic, cpu, cuda };
enum class filter_window { ram_lak, shepp_logan, cosine, hamming, hann };

algorithm parse_algorithm(std::string_view name);  ///< "fdk", "fbp"
backend parse_backend(std::string_view name);      ///< "auto", "cpu", "cuda"
filter_window parse_filter(std::string_view name);  ///< "ram-lak", "shepp-logan", ...
std::string to_string(filter_window w);

struct recon_options {
  algorithm algo = algorithm::fdk;
  filter_window filter = filter_window::ram_lak;
  double cutoff = 1.0;  ///< window cut-off as a fraction of Nyquist, (0, 1]
  backend where = backend::automatic;
  int threads = 0;      ///< CPU threads, 0 = all
  int device = 0;       ///< CUDA device ordinal
  /// Upper bound on GPU memory the CUDA backend may use (bytes); 0 = automatic (free memory
  /// less a safety margin). Forwarded into detail::cuda_options::memory_limit_bytes.
  std::int64_t gpu_memory_limit_bytes = 0;
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

/// Which backend `where` resolves to on this machine ("cpu" or "cuda") for CUDA device ordinal
/// `device`, with a one-line reason when automatic selection falls back to the CPU (empty
/// otherwise). backend::cuda without a usable device throws (the reason in the message).
backend resolve_backend(backend where, std::string* notice = nullptr, int device = 0);

}  // namespace ctforge
