// Per-pixel arithmetic of stitching a 360-degree offset-axis (half-acquisition) scan into a
// 180-degree one (src/preprocess/stitch_360.cpp), for the CPU loop and any kernel alike.
// Positions x are in detector pixels from the rotation axis, positive towards the side where
// the first half-turn's view reaches furthest (its wide side).
#pragma once

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Weight of the first half-turn's view at position x (pixels from the axis, + towards its
/// wide side) in a linear blend of width `blend` pixels centred on the axis: 0 for
/// x <= -blend / 2, 1 for x >= blend / 2, 1/2 + x / blend between; the flipped second
/// half-turn's view weighs 1 minus it. blend <= 0: a hard cut at the axis (1/2 on it).
CTFORGE_HD double stitch_weight(double x, double blend) {
  if (!(blend > 0.0)) return x > 0.0 ? 1.0 : (x < 0.0 ? 0.0 : 0.5);
  const double w = 0.5 + x / blend;
  return w < 0.0 ? 0.0 : (w > 1.0 ? 1.0 : w);
}

/// Linear interpolation of `row` (n values, pixel centres at 0 .. n-1) at `pos`, which the
/// caller keeps within [0, n - 1].
CTFORGE_HD float sample_linear(const float* row, long long n, double pos) {
  long long i = static_cast<long long>(pos);
  if (i >= n - 1) i = n - 1;
  const double t = pos - static_cast<double>(i);
  if (t <= 0.0 || i + 1 >= n) return row[i];
  return static_cast<float>((1.0 - t) * static_cast<double>(row[i]) +
                            t * static_cast<double>(row[i + 1]));
}

}  // namespace ctforge::kernels
