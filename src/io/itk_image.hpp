// Internal: ITK image set-up shared by the ITK volume formats and the DICOM writer.
#pragma once

// clang-format off
#include "io/itk_compiler.hpp"  // first: before any ITK header
// clang-format on
#include <itkImage.h>

#include "ctforge/volume.hpp"

namespace ctforge::detail {

using itk_image3 = itk::Image<float, 3>;

/// A new ITK float image with the size, spacing and origin of `g` (direction identity);
/// pixels not allocated.
inline itk_image3::Pointer new_itk_image(const volume_geometry& g) {
  auto img = itk_image3::New();
  itk_image3::RegionType region;
  itk_image3::SizeType size;
  size[0] = static_cast<itk::SizeValueType>(g.nx);
  size[1] = static_cast<itk::SizeValueType>(g.ny);
  size[2] = static_cast<itk::SizeValueType>(g.nz);
  region.SetSize(size);
  img->SetRegions(region);
  itk_image3::SpacingType spacing;
  itk_image3::PointType origin;
  for (int a = 0; a < 3; ++a) {
    spacing[a] = g.spacing_mm[a];
    origin[a] = g.origin_mm[a];
  }
  img->SetSpacing(spacing);
  img->SetOrigin(origin);
  return img;
}

}  // namespace ctforge::detail
