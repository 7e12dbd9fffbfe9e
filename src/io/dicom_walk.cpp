#include "io/dicom_walk.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ctforge::io::detail {

namespace {

class walker {
 public:
  walker(std::span<const unsigned char> bytes, dicom_walk& out, bool stop_at_pixels)
      : b_(bytes), out_(out), stop_(stop_at_pixels) {}

  void run() {
    std::size_t pos = 0;
    if (b_.size() >= 132 && std::memcmp(b_.data() + 128, "DICM", 4) == 0) {
      out_.preamble = true;
      pos = 132;
    }
    // File meta information (group 0002): always explicit VR little endian.
    std::string syntax = "1.2.840.10008.1.2";  // no meta group: implicit VR little endian
    if (pos + 8 <= b_.size() && u16le(pos) == 0x0002) {
      explicit_ = true;
      big_ = false;
      meta_ = true;
      const std::size_t end = b_.size();
      while (pos + 8 <= end && u16le(pos) == 0x0002) {
        if (!element(pos, end, 0, false)) return;
      }
      meta_ = false;
      if (syntax_seen_) syntax = out_.transfer_syntax;
    } else if (!out_.preamble && pos + 6 <= b_.size()) {
      // No meta group: guess the encoding from the first element.
      explicit_ = is_vr(pos + 4);
      syntax.clear();
    }
    if (!syntax.empty()) {
      if (syntax == "1.2.840.10008.1.2.1.99") {  // deflated: not walkable, GDCM inflates it
        out_.deflated = true;
        return;
      }
      explicit_ = syntax != "1.2.840.10008.1.2";
      big_ = syntax == "1.2.840.10008.1.2.2";
    }
    out_.explicit_vr = explicit_;
    out_.big_endian = big_;
    if (pos >= b_.size()) {
      fail(pos, "no data set after the file meta information");
      return;
    }
    const std::size_t end = b_.size();
    while (pos < end && out_.problem.empty() && !out_.stopped_at_pixels) {
      if (!element(pos, end, 0, false)) return;
    }
  }

 private:
  std::uint16_t u16le(std::size_t p) const {
    return static_cast<std::uint16_t>(b_[p] | (b_[p + 1] << 8));
  }
  std::uint16_t u16(std::size_t p) const {
    return big_ ? static_cast<std::uint16_t>((b_[p] << 8) | b_[p + 1]) : u16le(p);
  }
  std::uint32_t u32(std::size_t p) const {
    return big_ ? (std::uint32_t(b_[p]) << 24) | (std::uint32_t(b_[p + 1]) << 16) |
                      (std::uint32_t(b_[p + 2]) << 8) | b_[p + 3]
                : std::uint32_t(b_[p]) | (std::uint32_t(b_[p + 1]) << 8) |
                      (std::uint32_t(b_[p + 2]) << 16) | (std::uint32_t(b_[p + 3]) << 24);
  }
  bool is_vr(std::size_t p) const {
    static const char* vrs[] = {"AE", "AS", "AT", "CS", "DA", "DS", "DT", "FL", "FD",
                                "IS", "LO", "LT", "OB", "OD", "OF", "OL", "OV", "OW",
                                "PN", "SH", "SL", "SQ", "SS", "ST", "SV", "TM", "UC",
                                "UI", "UL", "UN", "UR", "US", "UT", "UV"};
    if (p + 2 > b_.size()) return false;
    for (const char* v : vrs)
      if (b_[p] == static_cast<unsigned char>(v[0]) &&
          b_[p + 1] == static_cast<unsigned char>(v[1]))
        return true;
    return false;
  }
  static bool long_vr(const char* vr) {
    for (const char* v :
         {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "UC", "UN", "UR", "UT", "SV", "UV"})
      if (vr[0] == v[0] && vr[1] == v[1]) return true;
    return false;
  }
  bool fail(std::size_t pos, const std::string& what) {
    if (out_.problem.empty())
      out_.problem = fmt::format("{} (at byte {} of {})", what, pos, b_.size());
    return false;
  }

  /// One element at `pos` (advanced past it). Group 0002 is read little endian explicit.
  bool element(std::size_t& pos, std::size_t end, int depth, bool in_item) {
    if (pos + 8 > end) return fail(pos, "truncated element header");
    const bool save_big = big_, save_explicit = explicit_;
    if (meta_) {
      big_ = false;
      explicit_ = true;
    }
    const std::uint16_t group = u16(pos), elem = u16(pos + 2);
    if (group == 0xFFFE) {
      if (in_item && elem == 0xE00D) {  // item delimiter
        pos += 8;
        big_ = save_big;
        explicit_ = save_explicit;
        return true;
      }
      return fail(pos, fmt::format("unexpected item tag (fffe,{:04x})", elem));
    }
    std::uint32_t len = 0;
    std::size_t header = 8;
    char vr[3] = "UN";
    if (explicit_) {
      if (!is_vr(pos + 4))
        return fail(pos, fmt::format("element ({:04x},{:04x}) has no valid VR", group, elem));
      vr[0] = static_cast<char>(b_[pos + 4]);
      vr[1] = static_cast<char>(b_[pos + 5]);
      if (long_vr(vr)) {
        if (pos + 12 > end) return fail(pos, "truncated element header");
        len = u32(pos + 8);
        header = 12;
      } else {
        len = u16(pos + 6);
      }
    } else {
      len = u32(pos + 4);
    }
    pos += header;
    dicom_element e;
    e.group = group;
    e.element = elem;
    if (explicit_) std::memcpy(e.vr, vr, 3);
    e.big_endian = big_;
    e.offset = pos;
    const bool pixels = group == 0x7FE0 && elem == 0x0010 && depth == 0;
    if (len == 0xFFFFFFFF) {
      if (explicit_ && !(vr[0] == 'S' && vr[1] == 'Q') &&
          !(vr[0] == 'O' && (vr[1] == 'B' || vr[1] == 'W')) && !(vr[0] == 'U' && vr[1] == 'N'))
        return fail(
            pos, fmt::format("element ({:04x},{:04x}) {} has undefined length", group, elem, vr));
      if (depth == 0) {
        e.undefined = true;
        out_.elements.push_back(e);
      }
      if (pixels && stop_) {
        out_.stopped_at_pixels = true;
        return true;
      }
      if (!sequence(pos, end, depth + 1)) return false;
    } else {
      if (pixels && stop_) {
        e.length = len;
        out_.elements.push_back(e);
        out_.stopped_at_pixels = true;
        return true;
      }
      if (len > end - pos)
        return fail(
            pos,
            fmt::format(
                "element ({:04x},{:04x}) announces {} bytes but only {} remain: truncated file",
                group, elem, len, end - pos));
      if (depth == 0) {
        e.length = len;
        out_.elements.push_back(e);
        if (meta_ && group == 0x0002 && elem == 0x0010) {
          out_.transfer_syntax = element_text(b_, e);
          syntax_seen_ = true;
        }
      }
      pos += len;
    }
    big_ = save_big;
    explicit_ = save_explicit;
    return true;
  }

  /// Items of an undefined-length sequence (or encapsulated pixel data) up to its delimiter.
  bool sequence(std::size_t& pos, std::size_t end, int depth) {
    if (depth > 32) return fail(pos, "sequences nested too deeply");
    for (;;) {
      if (pos + 8 > end) return fail(pos, "truncated sequence (no sequence delimiter)");
      const std::uint16_t group = u16(pos), elem = u16(pos + 2);
      const std::uint32_t len = u32(pos + 4);
      pos += 8;
      if (group != 0xFFFE)
        return fail(pos - 8, fmt::format("expected an item, found ({:04x},{:04x})", group, elem));
      if (elem == 0xE0DD) return true;
      if (elem != 0xE000)
        return fail(pos - 8, fmt::format("unexpected item tag (fffe,{:04x})", elem));
      if (len == 0xFFFFFFFF) {
        for (;;) {
          if (pos + 8 <= end && u16(pos) == 0xFFFE && u16(pos + 2) == 0xE00D) {
            pos += 8;
            break;
          }
          if (!element(pos, end, depth, true)) return false;
        }
      } else {
        if (len > end - pos)
          return fail(pos, "item announces more bytes than remain: truncated file");
        pos += len;
      }
    }
  }

  std::span<const unsigned char> b_;
  dicom_walk& out_;
  bool stop_ = false;
  bool explicit_ = true, big_ = false, meta_ = false, syntax_seen_ = false;
};

}  // namespace

const dicom_element* dicom_walk::find(std::uint16_t group, std::uint16_t element) const {
  for (const auto& e : elements)
    if (e.group == group && e.element == element) return &e;
  return nullptr;
}

dicom_walk walk_dicom(std::span<const unsigned char> bytes, bool stop_at_pixels) {
  dicom_walk out;
  walker(bytes, out, stop_at_pixels).run();
  return out;
}

std::string element_text(std::span<const unsigned char> bytes, const dicom_element& e) {
  if (e.undefined || e.offset + e.length > bytes.size()) return {};
  std::string v(reinterpret_cast<const char*>(bytes.data() + e.offset), e.length);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\0')) v.pop_back();
  std::size_t first = 0;
  while (first < v.size() && v[first] == ' ') ++first;
  return v.substr(first);
}

std::vector<std::uint16_t> element_u16(std::span<const unsigned char> bytes,
                                       const dicom_element& e) {
  std::vector<std::uint16_t> out;
  if (e.undefined || e.offset + e.length > bytes.size()) return out;
  for (std::size_t p = e.offset; p + 2 <= e.offset + e.length; p += 2)
    out.push_back(e.big_endian ? static_cast<std::uint16_t>((bytes[p] << 8) | bytes[p + 1])
                               : static_cast<std::uint16_t>(bytes[p] | (bytes[p + 1] << 8)));
  return out;
}

std::vector<float> element_f32(std::span<const unsigned char> bytes, const dicom_element& e) {
  std::vector<float> out;
  if (e.undefined || e.offset + e.length > bytes.size()) return out;
  for (std::size_t p = e.offset; p + 4 <= e.offset + e.length; p += 4) {
    unsigned char q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = bytes[p + static_cast<std::size_t>(e.big_endian ? 3 - k : k)];
    std::uint32_t u = std::uint32_t(q[0]) | (std::uint32_t(q[1]) << 8) |
                      (std::uint32_t(q[2]) << 16) | (std::uint32_t(q[3]) << 24);
    float f;
    std::memcpy(&f, &u, 4);
    out.push_back(f);
  }
  return out;
}

}  // namespace ctforge::io::detail
