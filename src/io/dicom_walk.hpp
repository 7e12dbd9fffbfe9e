// A structural walk of a DICOM file's elements, without GDCM: the Debian build of GDCM aborts
// the process (assert) on some truncated headers and silently accepts truncated pixel data, so
// every DICOM reader walks the file here first and refuses what does not fit, naming the byte.
// The walk lists the top-level elements (file meta group included) with their VR (explicit VR
// transfer syntaxes; empty for implicit VR), byte order, value offset and length; sequences
// and encapsulated pixel data are walked item by item to their delimiters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ctforge::io::detail {

/// One top-level element. Values of the file meta group (0002) are little endian.
struct dicom_element {
  std::uint16_t group = 0, element = 0;
  char vr[3] = "";           ///< explicit VR, "" in implicit VR data sets
  bool big_endian = false;   ///< byte order of the value
  bool undefined = false;    ///< undefined length (a sequence or encapsulated pixel data)
  std::size_t offset = 0;    ///< first byte of the value
  std::uint32_t length = 0;  ///< value length in bytes (0 when undefined)
};

struct dicom_walk {
  bool preamble = false;                        ///< 128-byte preamble + "DICM"
  std::string transfer_syntax;                  ///< (0002,0010); empty without a meta group
  bool explicit_vr = true, big_endian = false;  ///< the data set's encoding
  bool deflated = false;  ///< deflated transfer syntax: the data set was not walked
  std::string problem;    ///< why the file does not walk; empty when it does
  /// Set by a walk that stops at the pixel data: its element is the last one listed, its
  /// bytes need not be present (the caller checks offset + length against the file size).
  bool stopped_at_pixels = false;
  std::vector<dicom_element> elements;  ///< top level, in file order

  /// The first element (group, element), or nullptr.
  const dicom_element* find(std::uint16_t group, std::uint16_t element) const;
};

/// Walks `bytes`. With `stop_at_pixels`, the walk ends at a top-level Pixel Data (7FE0,0010)
/// element, whose value may lie beyond `bytes` (a header read on its own).
dicom_walk walk_dicom(std::span<const unsigned char> bytes, bool stop_at_pixels = false);

/// Values of an element of `bytes` (the buffer that was walked): text with DICOM's padding
/// (trailing spaces and NULs, leading spaces) removed; unsigned 16-bit and 32-bit float values
/// in the element's byte order (length / 2 or / 4 of them).
std::string element_text(std::span<const unsigned char> bytes, const dicom_element& e);
std::vector<std::uint16_t> element_u16(std::span<const unsigned char> bytes,
                                       const dicom_element& e);
std::vector<float> element_f32(std::span<const unsigned char> bytes, const dicom_element& e);

}  // namespace ctforge::io::detail
