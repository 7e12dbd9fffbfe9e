// A small separable 2D discrete wavelet transform with Daubechies' orthogonal wavelets, for the
// Fourier-wavelet stripe removal (stripes_fw.cpp). The conventions are PyWavelets' (the one
// tomopy's reference outputs were made with): "symmetric" boundary extension (the edge value
// repeated: x[-1] = x[0]), n samples give floor((n + taps - 1) / 2) coefficients per band, and
// the inverse of m coefficients gives 2 m - taps + 2 samples; dwt2 transforms along axis 0, then
// axis 1, and names the bands as PyWavelets does (horizontal: detail along axis 0, vertical:
// detail along axis 1).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ctforge::detail {

/// The four filters of an orthogonal wavelet: decomposition and reconstruction low- and
/// high-pass, `taps` coefficients each.
struct wavelet_filters {
  std::vector<double> dec_lo, dec_hi, rec_lo, rec_hi;
  std::int64_t taps() const { return static_cast<std::int64_t>(rec_lo.size()); }
};

/// Daubechies' wavelet with N vanishing moments: "dbN" (N = 1 ... 20, 2 N taps) or "haar" (db1).
/// usage_error naming `wname` otherwise.
wavelet_filters daubechies(std::string_view wname);

/// Coefficients per band of one level for n samples (n >= 1).
inline std::int64_t dwt_length(std::int64_t n, std::int64_t taps) {
  return (n + taps - 1) / 2;
}

/// A row-major 2D array of floats [rows][cols].
struct plane {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> v;
  void resize(std::int64_t r, std::int64_t c) {
    rows = r, cols = c;
    v.assign(static_cast<std::size_t>(r * c), 0.0f);
  }
  float& at(std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * cols + c)]; }
  float at(std::int64_t r, std::int64_t c) const {
    return v[static_cast<std::size_t>(r * cols + c)];
  }
};

/// One level of the 2D transform of x: approximation `a`, and the details `h` (along axis 0),
/// `v` (along axis 1) and `d` (both), each dwt_length(rows) x dwt_length(cols). `tmp`: scratch.
void dwt2(const plane& x, const wavelet_filters& w, plane& a, plane& h, plane& v, plane& d,
          plane& tmp);

/// The inverse of dwt2: `out` (2 m - taps + 2 per axis for m coefficients) from the four bands,
/// which must have one shape. `tmp`: scratch.
void idwt2(const plane& a, const plane& h, const plane& v, const plane& d, const wavelet_filters& w,
           plane& out, plane& tmp);

}  // namespace ctforge::detail
