// NeXus detection shared by the projection readers (src/io/nxtomo.cpp).
#pragma once

#include "io/h5.hpp"

namespace ctforge::io {

/// True when `f` holds detector frames in an NXtomo entry (found by NX_class and definition,
/// anywhere in the file) or in an /entry* group (files without NeXus attributes).
bool holds_nxtomo(const detail::h5::file& f);

/// "; <path> is an external link to <file>:<path>, which cannot be opened" when the frames of
/// an entry are a link that cannot be followed (a raw file not copied with the NeXus file);
/// "" otherwise.
std::string nxtomo_unreachable_frames(const detail::h5::file& f);

}  // namespace ctforge::io
