// The DICOM-CT-PD tags ctforge reads and writes (table and sources: docs/file-formats.md), shared
// by the reader (dicom_ct_pd.cpp) and the writer (dicom_ct_pd_write.cpp).
#pragma once

#include <cstdint>

namespace ctforge::io::detail {

struct ct_pd_tag {
  std::uint16_t group, element;
  const char* name;  ///< the dictionary's keyword
  const char* vr;    ///< value representation
  int vm;            ///< values it holds (0: one or more)
};

namespace ct_pd {
// Standard attributes.
inline constexpr ct_pd_tag series_uid{0x0020, 0x000E, "SeriesInstanceUID", "UI", 1};
inline constexpr ct_pd_tag instance{0x0020, 0x0013, "InstanceNumber", "IS", 1};
inline constexpr ct_pd_tag samples{0x0028, 0x0002, "SamplesperPixel", "US", 1};
inline constexpr ct_pd_tag image_rows{0x0028, 0x0010, "Rows", "US", 1};
inline constexpr ct_pd_tag image_cols{0x0028, 0x0011, "Columns", "US", 1};
inline constexpr ct_pd_tag bits_allocated{0x0028, 0x0100, "BitsAllocated", "US", 1};
inline constexpr ct_pd_tag bits_stored{0x0028, 0x0101, "BitsStored", "US", 1};
inline constexpr ct_pd_tag high_bit{0x0028, 0x0102, "HighBit", "US", 1};
inline constexpr ct_pd_tag pixel_representation{0x0028, 0x0103, "PixelRepresentation", "US", 1};
inline constexpr ct_pd_tag rescale_intercept{0x0028, 0x1052, "RescaleIntercept", "DS", 1};
inline constexpr ct_pd_tag rescale_slope{0x0028, 0x1053, "RescaleSlope", "DS", 1};
inline constexpr ct_pd_tag pixel_data{0x7FE0, 0x0010, "PixelData", "OW", 1};
// Detector (7029).
inline constexpr ct_pd_tag col_spacing{0x7029, 0x1002, "DetectorElementTransverseSpacing", "FL", 1};
inline constexpr ct_pd_tag row_spacing{0x7029, 0x1006, "DetectorElementAxialSpacing", "FL", 1};
inline constexpr ct_pd_tag shape{0x7029, 0x100B, "DetectorShape", "CS", 1};
inline constexpr ct_pd_tag detector_rows{0x7029, 0x1010, "NumberofDetectorRows", "US", 1};
inline constexpr ct_pd_tag detector_cols{0x7029, 0x1011, "NumberofDetectorColumns", "US", 1};
// Detector dynamics (7031).
inline constexpr ct_pd_tag focal_angle{0x7031, 0x1001, "DetectorFocalCenterAngularPosition", "FL",
                                       1};
inline constexpr ct_pd_tag focal_z{0x7031, 0x1002, "DetectorFocalCenterAxialPosition", "FL", 1};
inline constexpr ct_pd_tag focal_radius{0x7031, 0x1003, "DetectorFocalCenterRadialDistance", "FL",
                                        1};
inline constexpr ct_pd_tag detector_radius{0x7031, 0x1031, "ConstantRadialDistance", "FL", 1};
inline constexpr ct_pd_tag central_element{0x7031, 0x1033, "DetectorCentralElement", "FL", 2};
// Source dynamics (7033).
inline constexpr ct_pd_tag d_angle{0x7033, 0x100B, "SourceAngularPositionShift", "FL", 1};
inline constexpr ct_pd_tag d_z{0x7033, 0x100C, "SourceAxialPositionShift", "FL", 1};
inline constexpr ct_pd_tag d_radius{0x7033, 0x100D, "SourceRadialDistanceShift", "FL", 1};
inline constexpr ct_pd_tag ffs_mode{0x7033, 0x100E, "FlyingFocalSpotMode", "CS", 1};
inline constexpr ct_pd_tag angular_steps{0x7033, 0x1013, "NumberofSourceAngularSteps", "US", 1};
inline constexpr ct_pd_tag spectrum_index{0x7033, 0x1063, "SpectrumIndex", "US", 1};
inline constexpr ct_pd_tag photon_statistics{0x7033, 0x1065, "PhotonStatistics", "FL", 0};
// Projection data definitions (7037) and preprocessing flags (7039).
inline constexpr ct_pd_tag data_type{0x7037, 0x1009, "TypeofProjectionData", "CS", 1};
inline constexpr ct_pd_tag geometry_type{0x7037, 0x100A, "TypeofProjectionGeometry", "CS", 1};
inline constexpr ct_pd_tag log_flag{0x7039, 0x1009, "LogFlag", "CS", 1};
}  // namespace ct_pd

/// True for the private groups whose elements 10xx mark a DICOM-CT-PD file.
constexpr bool is_ct_pd_element(std::uint16_t group, std::uint16_t element) {
  return (group == 0x7029 || group == 0x7031 || group == 0x7033) && (element & 0xFF00) == 0x1000;
}

}  // namespace ctforge::io::detail
