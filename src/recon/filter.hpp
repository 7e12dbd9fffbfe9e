// Ramp filtering of detector rows for FDK / FBP.
//
// The filter is the band-limited ramp of Kak & Slaney (Principles of Computerized Tomographic
// Imaging, eq. 3.61): spatial kernel, for a detector pitch tau (mm),
//     h[0] = 1 / (4 tau^2),   h[n odd] = -1 / (n^2 pi^2 tau^2),   h[n even != 0] = 0,
// applied as the convolution sum  q[n] = tau * sum_m h[n - m] p[m]  (result in 1/mm times the
// units of p). Rows are zero padded to padded_length(cols) >= 2 cols, so the FFT's circular
// convolution equals that linear convolution exactly (no wrap-around), and building the
// response from the spatial kernel (rather than sampling |f|) gets the DC term right.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Smallest length of the form 2^a 3^b 5^c (a >= 1, so even) that is >= 2 * cols (cols >= 1).
std::int64_t padded_length(std::int64_t cols);

/// Value of the Kak-Slaney spatial kernel h[n] (1/mm^2) for a pitch of `pixel_mm`.
/// equiangular_rad > 0: the kernel for equiangular (curved-detector) fan data with that angular
/// pitch alpha (rad), Kak & Slaney eq. 3.89 g[n] = (n alpha / sin(n alpha))^2 h[n] (the 1/2 of
/// that equation is the full-scan redundancy, which the pre-weights hold). With pixel_mm =
/// alpha * SID (the pitch at the isocentre) it is g / SID^2 in 1/mm^2, which keeps the flat
/// detector's pre-weight and back-projection scale. Lags with n alpha >= 3 rad (never within a
/// detector whose fan is below 170 deg) keep h[n].
double ramp_kernel(std::int64_t n, double pixel_mm, double equiangular_rad = 0);

/// Window value at `x` = frequency / Nyquist in [0, 1] for a cut-off `cutoff` in (0, 1]
/// (0 above the cut-off). ram-lak 1; shepp-logan sinc(pi x / (2 c)); cosine cos(pi x / (2 c));
/// hamming 0.54 + 0.46 cos(pi x / c); hann 0.5 + 0.5 cos(pi x / c)  (the ASTRA / RTK windows,
/// with their frequency scaled by 1 / cutoff).
double window_value(filter_window w, double x, double cutoff);

/// Real frequency response, length padded_len / 2 + 1, to multiply the output of an unnormalised
/// real-to-complex FFT of a zero-padded row by before the unnormalised complex-to-real inverse
/// (FFTW, cuFFT). It includes the 1 / padded_len normalisation and the factor pixel_mm of the
/// convolution sum: response[k] = pixel_mm / padded_len * DFT(h_circular)[k] * window(k / (N/2)).
/// The DFT of the (real, even) kernel is computed directly in double precision.
/// padded_len must be even and >= 2; pixel_mm > 0; cutoff in (0, 1].
std::vector<float> ramp_response(std::int64_t padded_len, double pixel_mm, filter_window w,
                                 double cutoff, double equiangular_rad = 0);

/// Filters every row of [views][rows][cols] projections in place with FFTW (float). The FFTW
/// plans (batched r2c / c2r over rows) are created once per (padded length, batch) shape for the
/// whole process and reused; rows are processed in batches by OpenMP threads, each with its own
/// buffers, through the new-array execute functions.
class ramp_filter {
 public:
  /// equiangular_rad > 0: curved-detector kernel (see ramp_kernel).
  ramp_filter(std::int64_t cols, double pixel_mm, filter_window w, double cutoff,
              double equiangular_rad = 0);
  ~ramp_filter();
  ramp_filter(const ramp_filter&) = delete;
  ramp_filter& operator=(const ramp_filter&) = delete;

  std::int64_t cols() const { return cols_; }
  std::int64_t padded_cols() const { return padded_; }
  const std::vector<float>& response() const { return response_; }

  /// Filters `n_rows` contiguous rows of cols() floats each in place. threads = 0: all cores.
  void apply(float* rows, std::int64_t n_rows, int threads = 0) const;
  /// Filters every row of every view. Throws usage_error when proj.cols != cols().
  void apply(projection_stack& proj, int threads = 0) const;

  struct plan_pair;  // FFTW plans of one batch size (defined in filter.cpp)

 private:
  std::int64_t cols_, padded_;
  std::vector<float> response_;
};

}  // namespace ctforge::detail
