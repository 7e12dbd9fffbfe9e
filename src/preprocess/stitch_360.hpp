// The layout of a stitched 360-degree offset-axis scan (stitch_360.cpp), shared with
// find_center_360 (center_360.cpp) and the tests.
#pragma once

#include <cstdint>

#include "ctforge/preprocess.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Where the columns of a stitched view come from.
struct stitch_plan {
  double center = 0;  ///< axis column of the input
  stitch_side side = stitch_side::left;
  double blend = 0;        ///< blend width (pixels), clamped to the overlap
  std::int64_t width = 0;  ///< output columns
  double x0 = 0;           ///< position (pixels from the axis) of output column 0
};

/// The plan for a detector of `cols` columns, axis at `center`; usage_error naming center or
/// blend when they are invalid.
stitch_plan make_stitch_plan(std::int64_t cols, double center, double blend);

/// One stitched row: `first` (the view at t) and `second` (the view at t + 180 deg), `cols`
/// values each, into `out` (plan.width values).
void stitch_row(const float* first, const float* second, std::int64_t cols, const stitch_plan& s,
                float* out);

}  // namespace ctforge::detail
