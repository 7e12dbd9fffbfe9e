// The stripe-removal methods in their own files, dispatched from remove_stripes (stripes.cpp);
// options checked there already for the shared fields, here for their own.
#pragma once

#include "ctforge/preprocess.hpp"

namespace ctforge::detail {

/// stripe_method::fourier_wavelet on every row of p (stripes_fw.cpp), `threads` resolved.
void remove_stripes_fw(projections_ref p, const stripe_options& o, int threads);

/// stripe_method::titarenko on every row of p (stripes_ti.cpp), `threads` resolved.
void remove_stripes_ti(projections_ref p, const stripe_options& o, int threads);

}  // namespace ctforge::detail
