// Writing DICOM-CT-PD files (formats.hpp: write_dicom_ct_pd). Each file is serialised here
// element by element (explicit or implicit VR little endian, elements in ascending tag order,
// values padded to even lengths), so that the private tags carry exactly the VRs of the
// format's dictionary; the directory goes through temporary_output as every other output does.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/dicom_ct_pd_tags.hpp"

namespace ctforge::io {

namespace {

namespace fs = std::filesystem;
using detail::ct_pd_tag;
namespace tag = detail::ct_pd;

/// A DICOM file being serialised: the 128-byte preamble, "DICM", the meta group, the data set.
class dicom_writer {
 public:
  explicit dicom_writer(bool explicit_vr) : explicit_(explicit_vr) {}

  void text(std::uint16_t g, std::uint16_t e, const char* vr, std::string v) {
    if (v.size() % 2) v.push_back(std::strcmp(vr, "UI") == 0 ? '\0' : ' ');
    add(g, e, vr, std::vector<unsigned char>(v.begin(), v.end()));
  }
  void text(const ct_pd_tag& t, const std::string& v) { text(t.group, t.element, t.vr, v); }
  void u16(std::uint16_t g, std::uint16_t e, std::uint16_t v) {
    add(g, e, "US", {static_cast<unsigned char>(v & 0xFF), static_cast<unsigned char>(v >> 8)});
  }
  void u16(const ct_pd_tag& t, std::uint16_t v) { u16(t.group, t.element, v); }
  void f32(const ct_pd_tag& t, std::initializer_list<double> values) {
    std::vector<unsigned char> b;
    for (double x : values) {
      const auto f = static_cast<float>(x);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      for (int k = 0; k < 4; ++k) b.push_back(static_cast<unsigned char>(u >> (8 * k)));
    }
    add(t.group, t.element, "FL", std::move(b));
  }
  void add(std::uint16_t g, std::uint16_t e, const char* vr, std::vector<unsigned char> value) {
    elements_.push_back({g, e, vr, std::move(value)});
  }

  /// The file's bytes; `sop_class`, `sop_instance`: the meta group's (0002,0002 / 0003).
  std::vector<unsigned char> bytes(const std::string& sop_class, const std::string& sop_instance) {
    std::sort(elements_.begin(), elements_.end(), [](const element& a, const element& b) {
      return a.group != b.group ? a.group < b.group : a.elem < b.elem;
    });
    std::vector<unsigned char> meta;
    auto meta_text = [&](std::uint16_t e, const char* vr, std::string v) {
      if (v.size() % 2) v.push_back(std::strcmp(vr, "UI") == 0 ? '\0' : ' ');
      put(meta, {0x0002, e, vr, std::vector<unsigned char>(v.begin(), v.end())}, true);
    };
    put(meta, {0x0002, 0x0001, "OB", {0, 1}}, true);
    meta_text(0x0002, "UI", sop_class);
    meta_text(0x0003, "UI", sop_instance);
    meta_text(0x0010, "UI", explicit_ ? "1.2.840.10008.1.2.1" : "1.2.840.10008.1.2");
    meta_text(0x0013, "SH", "CTFORGE");
    std::vector<unsigned char> out(132, 0);
    std::memcpy(out.data() + 128, "DICM", 4);
    const auto n = static_cast<std::uint32_t>(meta.size());
    put(out,
        {0x0002,
         0x0000,
         "UL",
         {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
          static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)}},
        true);
    out.insert(out.end(), meta.begin(), meta.end());
    for (const auto& e : elements_) put(out, e, explicit_);
    return out;
  }

 private:
  struct element {
    std::uint16_t group, elem;
    const char* vr;
    std::vector<unsigned char> value;
  };
  static void le16(std::vector<unsigned char>& b, std::uint32_t v) {
    b.push_back(static_cast<unsigned char>(v));
    b.push_back(static_cast<unsigned char>(v >> 8));
  }
  static void put(std::vector<unsigned char>& b, const element& e, bool explicit_vr) {
    le16(b, e.group);
    le16(b, e.elem);
    const auto len = static_cast<std::uint32_t>(e.value.size());
    if (explicit_vr) {
      b.push_back(static_cast<unsigned char>(e.vr[0]));
      b.push_back(static_cast<unsigned char>(e.vr[1]));
      const std::string vr = e.vr;
      if (vr == "OB" || vr == "OW" || vr == "UN" || vr == "SQ" || vr == "UT" || vr == "OF") {
        le16(b, 0);
        le16(b, len & 0xFFFF);
        le16(b, len >> 16);
      } else {
        le16(b, len);
      }
    } else {
      le16(b, len & 0xFFFF);
      le16(b, len >> 16);
    }
    b.insert(b.end(), e.value.begin(), e.value.end());
  }

  bool explicit_;
  std::vector<element> elements_;
};

/// A UID under the UUID root 2.25 (ITU-T X.667): a random 128-bit number in decimal.
std::string new_uid(std::mt19937_64& rng) {
  unsigned __int128 x = (static_cast<unsigned __int128>(rng()) << 64) | rng();
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(x % 10)));
    x /= 10;
  } while (x != 0);
  return "2.25." + digits;
}

/// Decimal text of at most 16 characters (DS) that parses back to a value near `x`.
std::string ds_text(double x, int digits) {
  for (; digits >= 1; --digits) {
    std::string s = fmt::format("{:.{}g}", x, digits);
    if (s.size() <= 16) return s;
  }
  return fmt::format("{:.0e}", x);
}

/// A view's Rescale Slope / Intercept as written (text) and as read back (the parsed values),
/// and its stored values = round((x - intercept) / slope) in 0 .. 65535.
struct rescaled {
  std::string slope_text, intercept_text;
  std::vector<std::uint16_t> stored;  ///< [row][col] of our detector
};

rescaled rescale(const float* x, std::size_t n) {
  const auto [lo_it, hi_it] = std::minmax_element(x, x + n);
  const double lo = *lo_it, hi = *hi_it;
  bool integers = lo >= 0 && hi <= 65535;
  for (std::size_t i = 0; i < n && integers; ++i) integers = std::floor(x[i]) == x[i];
  rescaled r{std::string(1, '1'), std::string(1, '0'), {}};
  double slope = 1, intercept = 0;
  if (!integers) {
    // Intercept at or below the minimum on a grid of 1/1024 (exact in decimal; an integer when
    // that needs more than DS's 16 characters), slope rounded up to 6 digits so that the
    // maximum still fits. The values used are those the texts parse to, as a reader's are.
    intercept = std::floor(lo * 1024) / 1024;
    r.intercept_text = fmt::format("{}", intercept);
    if (r.intercept_text.size() > 16) r.intercept_text = fmt::format("{}", std::floor(lo));
    intercept = std::strtod(r.intercept_text.c_str(), nullptr);
    double want = (hi - intercept) / 65535.0;
    if (!(want > 0)) want = 1;
    for (double bump = 1;; bump *= 1.0001) {
      r.slope_text = ds_text(want * bump, 6);
      slope = std::strtod(r.slope_text.c_str(), nullptr);
      if ((hi - intercept) / slope <= 65535.0) break;
    }
  }
  r.stored.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    r.stored[i] = static_cast<std::uint16_t>(
        std::clamp(std::llround((x[i] - intercept) / slope), 0LL, 65535LL));
  return r;
}

/// The target directory: absent, or a directory of .dcm files only (then replaced).
void check_target(const std::string& dir, const std::string& target) {
  std::error_code ec;
  const fs::path parent =
      fs::path(target).has_parent_path() ? fs::path(target).parent_path() : fs::path(".");
  CTFORGE_EXPECTS(fs::is_directory(parent, ec),
                  fmt::format("{}: directory '{}' does not exist", dir, parent.string()));
  if (!fs::exists(fs::symlink_status(target, ec))) return;
  CTFORGE_EXPECTS(fs::is_directory(fs::symlink_status(target, ec)),
                  fmt::format("{}: exists and is not a directory; refusing to replace it", dir));
  for (const auto& e : fs::directory_iterator(target, ec)) {
    std::string ext = e.path().extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    CTFORGE_EXPECTS(e.is_regular_file() && ext == ".dcm",
                    fmt::format("{}: exists and holds {}, not only .dcm files; refusing to "
                                "replace it",
                                dir, e.path().filename().string()));
  }
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot list directory: {}", dir, ec.message()));
}

void check_input(const std::string& dir, const projection_view& p, const dicom_ct_pd_scan& s) {
  require_host(p, "writing DICOM-CT-PD files");
  CTFORGE_EXPECTS(p.views == static_cast<std::int64_t>(s.views.size()) && p.rows == s.rows &&
                      p.cols == s.cols && static_cast<std::int64_t>(p.data.size()) == p.size(),
                  fmt::format("{}: projections are {} x {} x {} (views, rows, cols), the scan "
                              "describes {} x {} x {}",
                              dir, p.views, p.rows, p.cols, s.views.size(), s.rows, s.cols));
  CTFORGE_EXPECTS(
      s.rows >= 1 && s.cols >= 1 && s.rows <= 65535 && s.cols <= 65535,
      fmt::format("{}: a detector of {} x {} pixels does not fit DICOM", dir, s.rows, s.cols));
  (void)geometry_from_dicom_ct_pd(s);  // the scan must describe a geometry
  for (std::size_t i = 0; i < p.data.size(); ++i)
    CTFORGE_EXPECTS(std::isfinite(p.data[i]),
                    fmt::format("{}: projection value {} is not finite; DICOM-CT-PD cannot "
                                "store it",
                                dir, i));
}

/// The elements of view `k` (everything but the meta group and the UIDs).
void view_elements(dicom_writer& w, const projection_view& p, const dicom_ct_pd_scan& s,
                   std::int64_t k, const dicom_ct_pd_write_options& opt) {
  const dicom_ct_pd_view& v = s.views[static_cast<std::size_t>(k)];
  const rescaled r = rescale(p.view(k), static_cast<std::size_t>(p.rows * p.cols));
  w.text(0x0008, 0x0008, "CS", "ORIGINAL\\PRIMARY\\AXIAL");
  w.text(0x0008, 0x0060, "CS", "CT");
  w.text(0x0008, 0x0070, "LO", "ctforge");
  w.text(tag::instance, std::to_string(v.instance > 0 ? v.instance : k + 1));
  w.u16(tag::samples, 1);
  w.text(0x0028, 0x0004, "CS", "MONOCHROME2");
  w.u16(tag::image_rows, static_cast<std::uint16_t>(opt.transposed ? s.cols : s.rows));
  w.u16(tag::image_cols, static_cast<std::uint16_t>(opt.transposed ? s.rows : s.cols));
  w.u16(tag::bits_allocated, 16);
  w.u16(tag::bits_stored, 16);
  w.u16(tag::high_bit, 15);
  w.u16(tag::pixel_representation, 0);
  w.text(tag::rescale_intercept, r.intercept_text);
  w.text(tag::rescale_slope, r.slope_text);
  // Private creators of the blocks 10xx, then the format's tags.
  w.text(0x7029, 0x0010, "LO", "DetectorSystemArrangementModule");
  w.f32(tag::col_spacing, {s.col_spacing_mm});
  w.f32(tag::row_spacing, {s.row_spacing_mm});
  w.text(tag::shape, s.shape == detector_shape::flat ? "FLAT" : "CYLINDRICAL");
  w.u16(tag::detector_rows, static_cast<std::uint16_t>(s.rows));
  w.u16(tag::detector_cols, static_cast<std::uint16_t>(s.cols));
  w.text(0x7031, 0x0010, "LO", "DetectorDynamicsModule");
  w.f32(tag::focal_angle, {v.focal_angle_rad});
  w.f32(tag::focal_z, {v.focal_z_mm});
  w.f32(tag::focal_radius, {v.focal_radius_mm});
  w.f32(tag::detector_radius, {v.detector_radius_mm});
  w.f32(tag::central_element, {s.central_col, s.central_row});
  w.text(0x7033, 0x0010, "LO", "SourceDynamicsModule");
  w.f32(tag::d_angle, {v.source_d_angle_rad});
  w.f32(tag::d_z, {v.source_d_z_mm});
  w.f32(tag::d_radius, {v.source_d_radius_mm});
  w.text(tag::ffs_mode, s.flying_focal_spot.empty() ? "FFSNONE" : s.flying_focal_spot);
  if (s.views_per_turn > 0 && s.views_per_turn <= 65535)
    w.u16(tag::angular_steps, static_cast<std::uint16_t>(s.views_per_turn));
  w.text(0x7037, 0x0010, "LO", "ProjectionDataDefinitions");
  if (!s.scan_type.empty()) w.text(tag::data_type, s.scan_type);
  w.text(tag::geometry_type, "FANBEAM");
  w.text(0x7039, 0x0010, "LO", "PreprocessingFlagsModule");
  w.text(tag::log_flag, "YES");
  // Pixels: our row r is the format's row rows - r (1-based); stored rows x cols or transposed.
  std::vector<unsigned char> px(static_cast<std::size_t>(2 * s.rows * s.cols));
  for (std::int64_t row = 0; row < s.rows; ++row)
    for (std::int64_t col = 0; col < s.cols; ++col) {
      const std::int64_t y = s.rows - 1 - row;
      const auto at =
          static_cast<std::size_t>(opt.transposed ? col * s.rows + y : y * s.cols + col);
      const std::uint16_t x = r.stored[static_cast<std::size_t>(row * s.cols + col)];
      px[2 * at] = static_cast<unsigned char>(x & 0xFF);
      px[2 * at + 1] = static_cast<unsigned char>(x >> 8);
    }
  w.add(tag::pixel_data.group, tag::pixel_data.element, "OW", std::move(px));
}

}  // namespace

void write_dicom_ct_pd(const std::string& dir, const projection_view& p,
                       const dicom_ct_pd_scan& scan, const dicom_ct_pd_write_options& opt) {
  check_input(dir, p, scan);
  std::string target = dir;
  while (target.size() > 1 && target.ends_with('/')) target.pop_back();
  check_target(dir, target);
  std::mt19937_64 rng(std::random_device{}());
  const std::string study = new_uid(rng), series = new_uid(rng), frame = new_uid(rng);
  const std::string ct_image_storage = "1.2.840.10008.5.1.4.1.1.2";
  temporary_output out(target, /*directory=*/true);
  for (std::int64_t k = 0; k < p.views; ++k) {
    dicom_writer w(opt.explicit_vr);
    const std::string instance = new_uid(rng);
    w.text(0x0008, 0x0016, "UI", ct_image_storage);
    w.text(0x0008, 0x0018, "UI", instance);
    w.text(0x0020, 0x000D, "UI", study);
    w.text(tag::series_uid, series);
    w.text(0x0020, 0x0052, "UI", frame);
    view_elements(w, p, scan, k, opt);
    const std::vector<unsigned char> bytes = w.bytes(ct_image_storage, instance);
    const std::string name = fmt::format("view_{:05d}.dcm", k + 1);
    write_file_bytes((fs::path(out.path()) / name).string(), bytes.data(), bytes.size(),
                     (fs::path(target) / name).string());
  }
  out.commit_directory();
}

}  // namespace ctforge::io
