// Foreign data formats: real projections in (DataExchange, NeXus NXtomo, TIFF stacks), volumes in
// and out (MetaImage, NRRD, NIfTI, DICOM series), geometry interchange with RTK and ASTRA, and
// rotation-centre estimation. No ITK, GDCM, HDF5 or TIFF types appear here.
//
// Projection pipeline (read_projections_any):
//   1. the format reader reads only the selected views / rows / columns (HDF5 hyperslabs, TIFF
//      scan lines) as raw frames, plus flat (white) and dark fields on the same pixels;
//   2. raw counts become line integrals:  p = -log(max((I - dark) / (flat - dark), floor));
//      pixels whose ratio is not positive (or not finite) are clamped to `floor` and counted;
//   3. bin_rows x bin_cols blocks are averaged (transmission before the log for raw counts);
//   4. the geometry (from the file, from a JSON override, or built from the angles) is cropped
//      and binned consistently: the detector centre moves to the centre of the kept pixels.
//
// Volume formats are chosen by extension: .h5/.hdf5 (native), .mha/.mhd (MetaImage), .nrrd/.nhdr,
// .nii/.nii.gz (NIfTI), and a directory or .dcm file (DICOM). Spacing and origin are kept
// (origin = centre of voxel (0,0,0), in mm). Volume coordinates are the file's physical
// coordinates unchanged (for DICOM: patient coordinates, LPS). Axis-aligned direction matrices
// with flipped axes are undone by flipping the voxel order; oblique directions are rejected.
//
// DICOM values: CT images store Hounsfield units, HU = 1000 (mu - mu_water) / mu_water, with
// mu the linear attenuation coefficient in 1/mm. Default mu_water = 0.0192 /mm: NIST XCOM gives
// mu/rho = 0.1929 cm^2/g for water at 70 keV (about the mean energy of a 120 kVp spectrum), i.e.
// 0.01929 /mm. Reading gives HU unless a mu_water is given; writing converts mu to HU unless the
// values are HU already.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::io {

// ---- projections -----------------------------------------------------------------------------

/// Indices [first, first + count) along one axis of the stored data; count < 0: to the end.
struct index_range {
  std::int64_t first = 0;
  std::int64_t count = -1;
};

/// Part of a projection data set: views, detector rows and columns, in the file's indexing.
struct detector_selection {
  index_range views, rows, cols;
};

/// How stored frames are interpreted.
enum class intensity_mode {
  automatic,       ///< raw counts when a flat field is available; otherwise float frames are
                   ///< taken as line integrals and integer frames are an error (counts need a flat)
  raw,             ///< raw counts: normalised by flat/dark and -log (a flat field is required)
  line_integrals,  ///< already -log(I / I0): only cropped and binned
};

/// Datasets of an HDF5 scan named by the user (paths inside the file, e.g. "/entry/tomo/data");
/// empty: found by the format's rules (NXtomo: by the entries' NX_class and definition;
/// DataExchange: /exchange/...). With `data` given, any HDF5 layout is read: flats, darks and
/// angles then come from these paths, from the NXtomo entry holding `data` (image_key,
/// rotation_angle) or from DataExchange's own datasets.
struct hdf5_scan_paths {
  /// frames [n][rows][cols] (NXtomo: all frames, keyed by image_key); for a .mat file the
  /// variable to read (empty: the only 2D / 3D numeric one)
  std::string data;
  std::string flats;   ///< flat (white) fields [n][rows][cols]
  std::string darks;   ///< dark fields [n][rows][cols]
  std::string angles;  ///< rotation angles: one per projection or one per frame of `data`
};

struct projection_read_options {
  /// HDF5 datasets named by the user (--data-path, --flat-path, --dark-path, --angles-path).
  hdf5_scan_paths datasets;
  /// Flat (white) / dark field images replacing those stored in the file: a TIFF file, a
  /// directory of TIFF files or a glob pattern; several images are averaged. Empty: use the
  /// file's own (DataExchange data_white/data_dark, NXtomo image_key 1/2) when present.
  std::string flat_path, dark_path;
  /// Geometry JSON describing the file's whole detector and every stored view. Required for TIFF
  /// stacks; overrides the geometry recorded in or derived from the file otherwise.
  std::string geometry_path;
  detector_selection select;  ///< what to read (before binning)
  std::int64_t bin_rows = 1;  ///< detector rows averaged into one (>= 1); a remainder is dropped
  std::int64_t bin_cols = 1;  ///< detector columns averaged into one (>= 1)
  /// Detector pixel pitch (mm) when the file does not record it (DataExchange; NXtomo without
  /// x_pixel_size); used for both directions.
  double pixel_size_mm = 1;
  intensity_mode mode = intensity_mode::automatic;
  /// Floor for the normalised transmission (I - dark) / (flat - dark), in (0, 1): smaller or
  /// non-finite values are clamped to it (line integral -log(floor)) and counted.
  double min_transmission = 1e-4;
  /// Detector orientation (reorient_projections), applied after selection and binning, which
  /// stay in the file's indexing: `transpose` swaps rows and columns, then `flip_u` reverses
  /// the columns and `flip_v` the rows. A geometry given or stored describes the reoriented
  /// detector (for a transposed one: cols = the stored rows).
  bool transpose = false, flip_u = false, flip_v = false;
  /// Angle-list text file (read_angle_list) giving the views' angles (and, with a key column,
  /// which stored frames are projections, flats and darks): builds a parallel-beam geometry
  /// (pixel_size_mm, detector centred) instead of a geometry JSON. Empty: none.
  std::string angles_path;
  bool angles_in_radians = false;  ///< unit of the angle list (default degrees)
  /// The input is one sinogram (views x cols, read as views x 1 row x cols): a single 2D TIFF
  /// image, a 2D .npy array or a 2D .mat variable. 2D .npy / .mat arrays are always sinograms;
  /// a single-page TIFF file is one when the angle list has as many lines as the image rows.
  bool sinogram = false;
  /// Open-beam normalisation without flat fields: half-open column ranges [first, last) of the
  /// stored images that see no object. Per view and detector row, I0 = mean of (I - dark) over
  /// those columns and the line integral is -log((I - dark) / I0). Empty: not used.
  std::vector<std::pair<std::int64_t, std::int64_t>> open_beam_cols;
};

/// An angle list as beamlines write it: one line per view (or, with a key column, per stored
/// frame); '#' starts a comment, blank lines are ignored, columns are separated by commas or
/// whitespace. Column 1: the angle; optional column 2: the image key (0 projection, 1 flat,
/// 2 dark, 3 invalid). Every line has the same number of columns.
struct angle_list {
  std::vector<double> angles_rad;  ///< one per line (flats / darks included), in radians
  std::vector<int> keys;           ///< one per line when the file has a key column, else empty
  std::vector<int> line_numbers;   ///< 1-based line of the file of each entry
  std::string warning;             ///< e.g. degrees assumed for angles that look like radians
};
/// Instead of a file, "START:STOP:COUNT" (no such file existing) gives COUNT angles from START
/// to STOP, both included (numpy.linspace, tomopy.angles), e.g. "0:179:180" or "0:360:459".
/// Throws error naming the file and line on a non-number, a key outside 0..3, a ragged column
/// count or an empty list.
angle_list read_angle_list(const std::string& path, bool radians = false);

/// Views of `p` with rows and columns swapped (`transpose`: out[v][c][r] = p[v][r][c], so
/// out.rows = p.cols), then columns reversed (`flip_u`) and rows reversed (`flip_v`).
/// Applying the same flips again restores `p` bit for bit.
projection_stack reorient_projections(const projection_view& p, bool transpose, bool flip_u,
                                      bool flip_v);

/// Projections read from any supported file; converts to projection_file by slicing.
struct loaded_projections : projection_file {
  /// "ctforge", "dxchange", "nxtomo", "tiff", "npy", "mat" or "dicom-ct-pd"
  std::string format;
  std::string warnings;      ///< human-readable notes (clamped pixels, ...); empty when none
  std::int64_t clamped = 0;  ///< pixels clamped to min_transmission
};

/// Reads projections from a native ctforge HDF5 file, a DataExchange HDF5 file (/exchange/data,
/// data_white, data_dark, theta in degrees: parallel beam), a NeXus NXtomo file (/entry*/ with
/// image_key 0 = projection, 1 = flat, 2 = dark and rotation_angle: parallel beam), or a TIFF
/// stack (a directory, a glob pattern or a multi-page TIFF file; images sorted by name with
/// numbers compared numerically; 8/16/32-bit integer or 32-bit float, one image per view), or
/// a DICOM-CT-PD scan (a directory of one DICOM file per view, or one such file: line
/// integrals and the scanner's geometry; see read_dicom_ct_pd). The result always carries a
/// geometry. Throws error naming the file on unreadable, truncated
/// or inconsistent input, usage_error on invalid options.
loaded_projections read_projections_any(const std::string& path,
                                        const projection_read_options& opt = {});

/// The geometry read_projections_any(path, opt) returns, without reading the projections (one
/// pixel of one view is read; the same checks of ranges, sizes and geometry apply).
geometry read_projection_geometry(const std::string& path, const projection_read_options& opt = {});

/// Options that read only rows [r0, r1) of what read_projections_any(path, opt) returns (rows of
/// the selected, binned and reoriented detector of `total_rows` rows): the same values, bit for
/// bit, from a hyperslab of the stored data. The geometry read with them describes the band.
projection_read_options row_band_options(const projection_read_options& opt,
                                         std::int64_t total_rows, std::int64_t r0, std::int64_t r1);

/// row_band_options, reading views [v0, v1) of those read_projections_any(path, opt) returns
/// (a slab unit's band: rows and views).
projection_read_options unit_band_options(const projection_read_options& opt,
                                          std::int64_t total_rows, std::int64_t r0, std::int64_t r1,
                                          std::int64_t v0, std::int64_t v1);

/// "ctforge", "dxchange", "nxtomo", "tiff", "npy", "mat" or "dicom-ct-pd" for a projection
/// file, from its content (HDF5, DICOM-CT-PD: is_dicom_ct_pd) or its name (directory, glob,
/// .tif/.tiff, .npy, .mat). Throws error when the file is none of those.
std::string projection_format(const std::string& path);

/// First index and count of `r` on an axis of `size` elements (count < 0: to the end). Throws
/// usage_error naming `what` (e.g. "views") and `path` when the range does not fit.
std::pair<std::int64_t, std::int64_t> resolve_range(const index_range& r, std::int64_t size,
                                                    std::string_view what, std::string_view path);

/// Raw frames of one acquisition restricted to a selection, as stored (no normalisation).
struct raw_scan {
  projection_stack frames;  ///< selected views x rows x cols
  projection_stack flats,
      darks;  ///< flat / dark frames on the same rows x cols (views = count, 0 if none)
  std::vector<double>
      angles_rad;  ///< angle of every stored view (full_views; empty when not recorded)
  std::int64_t full_views = 0, full_rows = 0, full_cols = 0;  ///< size of the whole stored data set
  double pixel_u_mm = 0, pixel_v_mm = 0;  ///< recorded pixel pitch (0: not recorded)
  bool integer_data = false;              ///< frames were stored as integers (counts)
  std::string notes;  ///< the reader's remarks for the user (one per line); empty when none
};

/// Readers behind read_projections_any. Ranges are checked against the stored sizes
/// (usage_error naming the option and the file). Only the selected pixels are read.
/// DataExchange, or with `paths.data` any HDF5 layout (see hdf5_scan_paths).
raw_scan read_dxchange(const std::string& path, const detector_selection& sel = {},
                       const hdf5_scan_paths& paths = {});
/// NeXus NXtomo: the first entry (NXentry or NXsubentry, anywhere in the file) whose
/// `definition` is NXtomo, else the first NeXus entry holding detector frames, else the
/// first /entry* group holding them (files without NeXus attributes); or the datasets named.
raw_scan read_nxtomo(const std::string& path, const detector_selection& sel = {},
                     const hdf5_scan_paths& paths = {});
/// Where read_nxtomo finds a scan in `path`: entry, frames, image keys, angles, pixel size
/// ("" for what is absent), one "name: path" per line. Throws error when there is none.
std::string describe_nxtomo_layout(const std::string& path, const hdf5_scan_paths& paths = {});
/// `source`: directory, glob pattern, or one (possibly multi-page) TIFF file.
raw_scan read_tiff_stack(const std::string& source, const detector_selection& sel = {});
/// TIFF file names a source expands to, in reading order (natural sort). Throws when empty.
std::vector<std::string> list_tiff_files(const std::string& source);

/// A .npy array (2D: a sinogram [views][cols]; 3D: a projection stack [views][rows][cols]);
/// Little / big endian floats (4, 8 bytes) and integers (1,
/// 2, 4 bytes), C or Fortran order. Refuses object, complex, structured and other-rank arrays.
raw_scan read_npy(const std::string& path, const detector_selection& sel = {});
/// A MATLAB .mat file, v5 (libmatio) or v7.3 (HDF5): the variable `name` (empty: the only 2D /
/// 3D numeric one). MATLAB index order: 2D (views, cols) = a sinogram, 3D (views, rows, cols).
raw_scan read_mat(const std::string& path, const std::string& name = {},
                  const detector_selection& sel = {});

// ---- DICOM-CT-PD -----------------------------------------------------------------------------
//
// Clinical CT projections in DICOM-CT-PD (Chen et al., Med. Phys. 42 (2015) 6964; the AAPM /
// TCIA Low Dose CT data): one DICOM file per view, line integrals stored as 16-bit pixels with
// Rescale Slope / Intercept, the geometry in private tags of groups 7029 / 7031 / 7033 (the
// table and its source: docs/file-formats.md). The format's frame is a left-handed cylindrical
// one (rho, phi, z): phi = 0 at 12 o'clock, phi growing counter-clockwise and z pointing into the
// gantry as seen from the table, Cartesian x = -rho sin phi, y = rho cos phi. We map it onto ours
// (right-handed, rotation axis +z) by flipping its vertical axis:
//     x = x_pd,  y = -y_pd,  z = z_pd,   so that our view angle t = -phi.
// Detector column 1 (the manual's indices are 1-based) is the leftmost seen from the table with
// the detector at 6 o'clock: columns grow along our u. Row 1 is the row farthest from the table
// (largest z): rows are stored reversed, our row r is the format's row rows - r.
// DetectorCentralElement (X, Y) is where the ray from the detector's focal centre through the
// isocentre meets the detector: our offsets are off_u = ((cols + 1) / 2 - X) du (an arc length on
// a cylindrical detector) and off_v = (Y - (rows + 1) / 2) dv. ConstantRadialDistance is our SDD,
// DetectorFocalCenterRadialDistance our SID.

/// One view (file) of a DICOM-CT-PD scan in the format's own terms.
struct dicom_ct_pd_view {
  double focal_angle_rad = 0;     ///< (7031,1001) DetectorFocalCenterAngularPosition, phi0
  double focal_z_mm = 0;          ///< (7031,1002) DetectorFocalCenterAxialPosition, z0
  double focal_radius_mm = 0;     ///< (7031,1003) DetectorFocalCenterRadialDistance, rho0
  double detector_radius_mm = 0;  ///< (7031,1031) ConstantRadialDistance, d0
  /// (7033,100B / 100C / 100D) the focal spot's offsets from the detector's focal centre
  /// (flying focal spot): the source sits at (rho0 + d_radius, phi0 + d_angle, z0 + d_z).
  double source_d_angle_rad = 0, source_d_z_mm = 0, source_d_radius_mm = 0;
  std::int64_t instance = 0;                        ///< (0020,0013) Instance Number (0: absent)
  double rescale_slope = 1, rescale_intercept = 0;  ///< (0028,1053), (0028,1052)
  std::string file;  ///< where it was read from (empty for a scan to write)
};

/// A DICOM-CT-PD scan's geometry in the format's terms (what every file repeats, and the views
/// in acquisition order).
struct dicom_ct_pd_scan {
  std::int64_t cols = 0, rows = 0;  ///< (7029,1011) NumberofDetectorColumns, (7029,1010) Rows
  double col_spacing_mm = 0;  ///< (7029,1002) DetectorElementTransverseSpacing (at the detector)
  double row_spacing_mm = 0;  ///< (7029,1006) DetectorElementAxialSpacing (at the detector)
  detector_shape shape = detector_shape::cylindrical;  ///< (7029,100B) CYLINDRICAL or FLAT
  double central_col = 0, central_row = 0;    ///< (7031,1033) DetectorCentralElement, 1-based
  std::string flying_focal_spot = "FFSNONE";  ///< (7033,100E) FlyingFocalSpotMode
  std::int64_t views_per_turn = 0;  ///< (7033,1013) NumberofSourceAngularSteps (0: absent)
  std::string scan_type;            ///< (7037,1009) TypeofProjectionData: HELICAL, AXIAL
  std::vector<dicom_ct_pd_view> views;
};

/// Our geometry of a DICOM-CT-PD scan (see above). Without source shifts, with one focal radius
/// and views on a regular helix (angles within 1% of a step and focal heights within 1% of a
/// detector row at the isocentre of a line): "helical" (pitch and first height from the first
/// and last views, our angles the format's negated) or, when every height is the same, a
/// circular "cone" whose z = 0 is that height. Otherwise (flying focal spot, irregular views)
/// "cone_vec" with each view's source; a cylindrical detector then stays centred on the focal
/// centre's arc at the centre pixel but is modelled as a cylinder about that view's source
/// (docs/file-formats.md measures what that costs). `how` (optional) says which and why.
/// Throws usage_error for a SPHERICAL or unknown detector shape or invalid values.
geometry geometry_from_dicom_ct_pd(const dicom_ct_pd_scan& scan, std::string* how = nullptr);

/// The DICOM-CT-PD description of a "helical" or circular "cone" geometry (one offset for all
/// views), flat or cylindrical, without source shifts: the inverse of
/// geometry_from_dicom_ct_pd. usage_error for other geometries.
dicom_ct_pd_scan dicom_ct_pd_from_geometry(const geometry& g);

/// What read_dicom_ct_pd returns.
struct dicom_ct_pd_data {
  projection_stack projections;  ///< [view][row][col] line integrals, rescale applied
  geometry geom;                 ///< geometry_from_dicom_ct_pd(scan)
  dicom_ct_pd_scan scan;         ///< the format's own description, views in acquisition order
  std::string warnings;          ///< notes (e.g. how the views were ordered); empty when none
};

/// Reads a DICOM-CT-PD scan: a directory of one file per view (files that are not DICOM are
/// ignored) or a single file. Views are ordered by Instance Number (0020,0013) (all files need
/// one, all distinct; without any, by file name); every file must hold 16-bit uncompressed
/// pixels of NumberofDetectorRows x Columns (stored rows x cols as the manual says, or cols x
/// rows as the TCIA files are) and the same detector. Throws error naming the file and the tag
/// on a missing tag, a wrong VR or length, inconsistent files or a truncated file.
dicom_ct_pd_data read_dicom_ct_pd(const std::string& path);

/// The frames of a DICOM-CT-PD scan restricted to `sel` (only the selected views' files and
/// pixels are read), and the geometry of the whole scan (read_projections_any's reader).
raw_scan read_dicom_ct_pd_frames(const std::string& path, const detector_selection& sel,
                                 geometry& whole);

/// True when `path` is a DICOM-CT-PD file, or a directory whose first DICOM file (in name
/// order) carries DICOM-CT-PD tags (any element 10xx of groups 7029, 7031, 7033); a CT image
/// series is not.
bool is_dicom_ct_pd(const std::string& path);

/// Summary of a DICOM-CT-PD scan (detector, views, angles, heights, geometry read).
std::string describe_dicom_ct_pd(const std::string& path);

struct dicom_ct_pd_write_options {
  /// Store each view's pixels as cols x rows (DICOM Rows = detector columns), as the TCIA files
  /// do, instead of the manual's rows x cols.
  bool transposed = false;
  bool explicit_vr = true;  ///< explicit VR little endian; false: implicit VR little endian
};

/// Writes `p` ([view][row][col] line integrals, as read_dicom_ct_pd returns them) and `scan`
/// (one view per projection) as one DICOM-CT-PD file per view, "view_00001.dcm", ..., with
/// Instance Numbers 1, 2, ..., unsigned 16-bit pixels and per view a Rescale Slope / Intercept
/// written as decimal strings and used exactly: each value is rounded to intercept + k slope
/// (slope 1, intercept 0 when the view's values are integers in 0..65535). Built in a
/// temporary directory beside `dir` that replaces it as a unit; an existing `dir` must hold
/// only .dcm files. usage_error for non-finite values or sizes that do not match.
void write_dicom_ct_pd(const std::string& dir, const projection_view& p,
                       const dicom_ct_pd_scan& scan, const dicom_ct_pd_write_options& opt = {});

/// Writes one float32 TIFF per view into directory `dir`, named `<prefix>_00000.tif`, ..., and
/// with `geometry_json` non-empty that text as `dir`/geometry.json. The stack is built in a
/// temporary directory beside `dir` and replaces `dir` as a unit (see atomic_write.hpp): `dir`
/// then holds exactly the new stack. The parent directory must exist (usage_error otherwise); an
/// existing `dir` is replaced only when it holds nothing but .tif/.tiff files and geometry.json.
void write_tiff_stack(const std::string& dir, const projection_view& p,
                      const std::string& prefix = "proj", const std::string& geometry_json = {});

/// Result of normalize().
struct normalize_report {
  std::int64_t clamped = 0;  ///< pixels whose transmission was clamped
  std::string warnings;
};
/// Turns a raw scan into line integrals (mode raw) or keeps its values (line_integrals), then
/// bins. `context` names the file in messages. Output: views x rows/bin_rows x cols/bin_cols.
projection_stack normalize(const raw_scan& scan, intensity_mode mode, std::int64_t bin_rows,
                           std::int64_t bin_cols, double min_transmission,
                           const std::string& context, normalize_report* report = nullptr);

/// Geometry of a selection of `g` (which describes the whole stored data set): keeps the
/// selected views, crops the detector and bins it (pixel pitch x bin), moving the detector
/// centre to the centre of the kept pixels. Circular geometries stay circular (offsets change).
geometry select_geometry(const geometry& g, const detector_selection& sel, std::int64_t bin_rows,
                         std::int64_t bin_cols);

// ---- volumes ---------------------------------------------------------------------------------

/// Water attenuation used for HU conversions by default (1/mm, about 70 keV; see above).
inline constexpr double default_mu_water_per_mm = 0.0192;
inline double hu_from_mu(double mu, double mu_water) {
  return 1000.0 * (mu - mu_water) / mu_water;
}
inline double mu_from_hu(double hu, double mu_water) {
  return mu_water * (1.0 + hu / 1000.0);
}

enum class volume_format { hdf5, metaimage, nrrd, nifti, dicom, zarr };
/// Format from the path: a path with a component ending in .zarr, or a directory holding Zarr
/// metadata -> zarr; an existing directory, a path without extension or ending in '/', or
/// .dcm -> dicom; .h5/.hdf5, .mha/.mhd, .nrrd/.nhdr, .nii/.nii.gz. Throws usage_error naming
/// the path otherwise.
volume_format volume_format_of(const std::string& path);
std::string to_string(volume_format f);

struct volume_read_options {
  /// DICOM only: convert HU to attenuation mu (1/mm) with this water value. Empty: keep HU.
  std::optional<double> mu_water_per_mm;
};
volume read_volume_any(const std::string& path, const volume_read_options& opt = {});

struct volume_write_options {
  double mu_water_per_mm = default_mu_water_per_mm;  ///< DICOM: HU = 1000 (mu - mu_w) / mu_w
  bool values_are_hu = false;  ///< DICOM: the volume holds HU already (no conversion)
  bool compress = true;        ///< MetaImage / NRRD / NIfTI (.nii.gz always compresses)
  std::string series_description = "ctforge reconstruction";  ///< DICOM (0008,103E)
};
/// Writes atomically: a temporary file (or, for DICOM, a temporary directory) renamed into place.
/// A DICOM target directory that exists must be empty or hold only .dcm files (it is replaced).
void write_volume_any(const std::string& path, const volume_view& v,
                      const volume_write_options& opt = {});

/// ITK formats (MetaImage, NRRD, NIfTI), any scalar pixel type read as float.
volume read_itk_volume(const std::string& path);
void write_itk_volume(const std::string& path, const volume_view& v, bool compress = true);

/// DICOM: a directory holding one series, or a single file. Slices sorted by Image Position
/// (Patient); equal spacing and a single series are checked (error naming the path otherwise).
/// Values: stored * slope + intercept (HU for CT), or mu when opt.mu_water_per_mm is set.
volume read_dicom(const std::string& path, const volume_read_options& opt = {});
/// One int16 CT slice per z, with rescale slope/intercept, Image Position/Orientation (Patient),
/// Pixel Spacing, Slice Thickness, one Study/Series Instance UID, Modality CT, Manufacturer
/// "ctforge". Written into "<dir>.part" then renamed to `dir`.
void write_dicom_series(const std::string& dir, const volume_view& v,
                        const volume_write_options& opt = {});

// ---- Zarr ------------------------------------------------------------------------------------
//
// Zarr arrays in local directories (s3://: the command line copies them, the Python package
// reads and writes them in place). Read: Zarr v3 and v2
// arrays of 1 to 3 dimensions, real or boolean element types (converted to float), the codecs
// zarr-python writes (bytes, transpose, sharding_indexed, blosc, zstd, gzip, crc32c; v2: blosc,
// zstd, zlib, gzip, bz2, C or F order); chunks never written read as the fill value. Written: one
// float32 array in shards of whole planes (about 64 MiB each), one chunk per plane inside them,
// Blosc zstd with byte shuffle, as python/ctforge/zarr_volumes.py writes, built in a temporary
// directory that replaces the target as a unit (docs/file-formats.md lists the attributes).

/// True for a path one of whose components ends in .zarr, or a directory holding zarr.json or
/// .zarray.
bool is_zarr_path(const std::string& path);
/// A volume [z][y][x]: attributes spacing_mm / origin_mm (x, y, z; origin = centre of voxel
/// (0, 0, 0)) when present, else 1 mm and the grid centred. Refuses arrays of projections,
/// arrays whose ctforge_complete attribute is there and not true (an unfinished run's),
/// non-finite values (naming the voxel) and s3:// URLs (usage_error).
volume read_zarr_volume(const std::string& path);
void write_zarr_volume(const std::string& path, const volume_view& v, bool compress = true);
/// Every value of a Zarr array of 1 to 3 dimensions as float, C order, whatever it holds;
/// `shape` receives its shape (1 to 3 numbers).
std::vector<float> read_zarr_array(const std::string& path, std::vector<std::int64_t>& shape);
/// The stored frames of a Zarr array of projections (3D [views][rows][cols], or 2D [views][cols]
/// a sinogram) restricted to `sel`: only the chunks the selection touches are read. `stored`
/// receives the geometry of the attribute ctforge_geometry when the array has one.
raw_scan read_zarr_frames(const std::string& path, const detector_selection& sel,
                          std::optional<geometry>& stored);
/// Line integrals with their geometry (attribute ctforge_geometry, the geometry JSON).
void write_zarr_projections(const std::string& path, const projection_view& p, const geometry& g,
                            bool compress = true);
/// A Zarr volume written a few z-planes at a time (slab-wise reconstructions into .zarr): each
/// shard of `planes_per_shard` planes is compressed and written as soon as its planes are all
/// there (units aligned with the shards are written straight from the caller's planes; others
/// wait in memory for the rest of their shard), into a temporary directory beside `path` that
/// commit() checks (every shard written), completes (zarr.json last) and swaps into place.
class zarr_volume_writer : public plane_writer {
 public:
  zarr_volume_writer(const std::string& path, const volume_geometry& g,
                     std::int64_t planes_per_shard, bool compress = true);
  ~zarr_volume_writer() override;
  zarr_volume_writer(const zarr_volume_writer&) = delete;
  zarr_volume_writer& operator=(const zarr_volume_writer&) = delete;
  void write_planes(std::int64_t k0, std::span<const float> planes) override;
  void commit() override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The plane writer for `path`: volume_file_writer for .h5, zarr_volume_writer (shards of
/// `planes_per_unit` planes) for .zarr; usage_error naming the path for other formats.
std::unique_ptr<plane_writer> open_plane_writer(const std::string& path, const volume_geometry& g,
                                                std::int64_t planes_per_unit);

/// "projections" (an array with a ctforge_geometry attribute, or an axes attribute starting
/// with "view") or "volume".
std::string zarr_content_kind(const std::string& path);
/// Summary: Zarr version, shape, element type, chunks, codecs, ctforge attributes.
std::string describe_zarr(const std::string& path);

/// Summary of a DICOM file or series directory (size, spacing, positions, value range, tags).
std::string describe_dicom(const std::string& path);
/// Summary of an ITK-readable volume file (size, spacing, origin, pixel type, value range).
std::string describe_itk_volume(const std::string& path);
/// Summary of any file or directory that read_projections_any or read_volume_any accepts.
std::string describe_any(const std::string& path);

/// What a path holds, from its name and (HDF5) content: "geometry" (.json, .xml, .txt, .vec),
/// "projections" (TIFF stack or glob, .tif/.tiff, HDF5 without /volume) or "volume" (every
/// other volume format, a directory without TIFF files = DICOM). Throws error when an HDF5 file
/// cannot be opened, usage_error for an unknown extension.
std::string content_kind(const std::string& path);

// ---- geometry interchange --------------------------------------------------------------------
//
// RTK (ThreeDCircularProjectionGeometry, XML "RTKThreeDCircularGeometry" version 3): RTK's
// world frame rotates about its y axis, with the source on +z at gantry angle 0. We map it to
// ours (rotation axis +z, source on -y at angle 0) by the proper rotation
//     x = X_rtk,  y = -Z_rtk,  z = Y_rtk,
// under which GantryAngle equals our view angle, ProjectionOffsetX/Y equal our detector
// offsets u/v, SourceToIsocenter/DetectorDistance our SID/SDD. RTK keeps the pixel grid in the
// projection images; we assume (and our exports imply) images centred on the detector origin:
// image origin = -(size - 1) / 2 * spacing, identity direction, spacing = our pixel pitch.
// OutOfPlane/InPlane angles and source offsets follow RTK's ZXY Euler convention and give vector
// geometries.
//
// ASTRA (cone_vec / parallel3d_vec): one row of 12 numbers per view (src or ray, d, u, v): the
// source (ray direction), the detector centre, the step between columns and between rows, in
// ASTRA's x, y, z world frame, which is ours (its volumes are indexed z, y, x as well).

/// One projection of an RTK geometry (distances in mm, angles in degrees).
struct rtk_projection {
  double sid = 0, sdd = 0, gantry_deg = 0;
  double proj_offset_x = 0, proj_offset_y = 0;
  double out_of_plane_deg = 0, in_plane_deg = 0;
  double source_offset_x = 0, source_offset_y = 0;
  /// RadiusCylindricalDetector (mm): 0 = flat panel; otherwise a cylindrical detector tangent
  /// to the flat one along its v axis through the un-offset origin, u measured along the arc.
  /// ctforge's cylindrical detectors are those with radius = SDD (centred on the source).
  double radius_cylindrical = 0;
};

/// Our world point (mm) from an RTK world point, and back.
inline vec3 world_from_rtk(vec3 p) {
  return {p.x, -p.z, p.y};
}
inline vec3 rtk_from_world(vec3 p) {
  return {p.x, p.z, -p.y};
}

/// Parses RTK geometry XML (version 2 or 3; element names case-insensitive, values set before
/// a `<Projection>` carry over, as in RTK). When a `<Matrix>` is present it must agree with the
/// parameters (RTK's own tolerance, 1e-3). Throws error naming `origin` on malformed input.
std::vector<rtk_projection> parse_rtk_xml(std::string_view xml,
                                          std::string_view origin = "RTK geometry");
/// RTK XML for the given projections (with each projection's matrix, so RTK can read it).
std::string rtk_xml(std::span<const rtk_projection> projections);
/// RTK's 3x4 projection matrix (RTK world -> centred projection coordinates in mm), row-major.
std::array<double, 12> rtk_matrix(const rtk_projection& p);

/// Our geometry from RTK projections, for a detector of cols x rows pixels of pitch du x dv mm.
/// Circular cone / parallel when the tilt angles and source offsets are zero and SID/SDD are
/// constant, a vector geometry otherwise. RadiusCylindricalDetector = SDD on a circular cone
/// scan gives a cylindrical detector; any other non-zero radius is refused (usage_error).
geometry geometry_from_rtk(std::span<const rtk_projection> projections, std::int64_t cols,
                           std::int64_t rows, double du_mm, double dv_mm);
/// RTK projections for a geometry whose detector has orthogonal u and v of constant length
/// (every circular geometry; vector geometries that satisfy this). Parallel beams also need the
/// ray perpendicular to the detector. Throws usage_error otherwise. A cylindrical detector gives
/// RadiusCylindricalDetector = SDD.
std::vector<rtk_projection> rtk_from_geometry(const geometry& g);
geometry read_rtk_geometry(const std::string& path, std::int64_t cols, std::int64_t rows,
                           double du_mm, double dv_mm);
void write_rtk_geometry(const std::string& path, const geometry& g);

using astra_vector = std::array<double, 12>;
/// ASTRA rows (cone_vec for cone beams, parallel3d_vec for parallel beams), one per view.
std::vector<astra_vector> astra_vectors(const geometry& g);
/// Vector geometry from ASTRA rows.
geometry geometry_from_astra(beam_kind beam, std::int64_t cols, std::int64_t rows,
                             std::span<const astra_vector> rows_of_12);
/// Text file: one view per line, 12 numbers separated by spaces or commas; '#' starts a
/// comment (what numpy.savetxt / numpy.loadtxt read and write). Written with 17 digits.
void write_astra_vectors(const std::string& path, const geometry& g);
geometry read_astra_vectors(const std::string& path, beam_kind beam, std::int64_t cols,
                            std::int64_t rows);

/// PNG montage of reconstruct_center_candidates' slices: a grid of tiles (about square, left to
/// right then down), each labelled above with its column (`columns[k]`, 2 decimals, digits of a
/// built-in 5 x 7 font), +y up, one grey window for all (the 0.5 / 99.5 percentiles) so that
/// tiles compare. Written atomically (write_atomically).
void write_center_montage(const std::string& path, const volume_view& slices,
                          std::span<const double> columns);
/// Tiles per row and rows of tiles of a montage of `count` tiles.
std::pair<std::int64_t, std::int64_t> montage_grid(std::int64_t count);
/// Height in pixels of the label band above each tile.
inline constexpr std::int64_t montage_label_height = 11;
/// Black pixels between tiles (and around the montage).
inline constexpr std::int64_t montage_gap = 2;

}  // namespace ctforge::io

namespace ctforge {

/// Detector column (0-based pixels, sub-pixel) onto which the rotation axis projects, estimated
/// from the data alone: find_center_of_rotation(proj, g).column (below). The opposite-view
/// registration it falls back to, and reports as registration_column: each view at angle t is
/// registered against the mirrored view at t + 180 deg (the nearest view, within one angular step,
/// linearly interpolated - or at the end of a 180 deg scan extrapolated - with its neighbour to t +
/// 180 deg), by cross-correlation with a parabola fit of the peak (correlations summed over
/// detector rows); the median over pairs is returned. Parallel beams: exact relation p(t + pi, s) =
/// p(t, -s); fan / cone beams (circular, about 360 deg coverage): approximate, good for objects
/// near the axis. Needs at least one view whose opposite angle lies within one angular step of
/// another view. Throws usage_error when the geometry is not circular or no such pair exists.
double estimate_center_of_rotation(const projection_view& proj, const geometry& g);

/// Options of find_center_of_rotation.
struct center_search_options {
  /// Detector row whose sinogram is searched; -1: up to 4 rows spread over the detector (their
  /// metrics summed).
  std::int64_t row = -1;
  /// Search range (detector columns). NaN: the middle half of the detector, where the flipped
  /// sinogram overlaps the sinogram on at least half the detector (the default and the limit).
  double min_column = std::numeric_limits<double>::quiet_NaN();
  double max_column = std::numeric_limits<double>::quiet_NaN();
  /// Radius of the double wedge, as a fraction of half the detector width (Vo's "ratio"): the
  /// sinogram of an object within this radius of the axis holds no energy outside the wedge.
  double wedge_ratio = 0.5;
  /// CPU threads for the candidates (0: all cores).
  int threads = 0;
};

/// Result of find_center_of_rotation.
struct center_estimate {
  double column = 0;      ///< detector column (0-based, sub-pixel) of the rotation axis
  double confidence = 0;  ///< 0 (no evidence for this column over another) ... 1 (unambiguous)
  /// "fourier" (Vo's method, parallel beams covering 180 deg or more), "half-acquisition"
  /// (find_center_360: a 360-degree parallel scan with its axis outside the middle half of the
  /// detector) or "registration" (opposite views, the fallback for fan / cone beams and short
  /// or irregular scans).
  std::string method;
  /// The opposite-view registration's estimate (estimate_center_of_rotation's former answer),
  /// for comparison; NaN when it found no structure.
  double registration_column = std::numeric_limits<double>::quiet_NaN();
  /// The coarse search: candidate columns and the metric of each (fourier: lower is better;
  /// registration: empty).
  std::vector<double> candidates, metric;
};

/// Confidence below which ctforge warns that the estimate may be wrong.
inline constexpr double low_center_confidence = 0.5;

/// Rotation-axis column with a confidence figure.
///
/// Parallel beams whose views cover 180 degrees or more at an even angular step: Vo's
/// Fourier-space method (N. T. Vo, M. Drakopoulos, R. C. Atwood, C. Reinhard, Opt. Express 22
/// (2014) 19078). The views over the first 180 degrees form a sinogram s (views x columns).
/// For a candidate axis column c the sinogram mirrored about c, g(col) = s(2c - col), is the
/// scan from 180 to 360 degrees; stacked under s it makes a 360-degree sinogram, which for the
/// right c is continuous and whose 2D Fourier transform is confined to the "bow tie"
/// |n| <= 2 pi f r (angular harmonic n, spatial frequency f in cycles per pixel, object radius
/// r). The metric is the mean Fourier magnitude inside the complementary double wedge
/// |n| > 2 pi f r, r = wedge_ratio x half the width, normalised by the sinogram's norm: the
/// right centre minimises it. Columns of the mirrored copy whose partner lies off the detector
/// take the sinogram's own values (so the stack's edges match whatever c is); truncation by a
/// field of view narrower than the object leaves both halves consistent at the right c.
///  1. Coarse: the sinogram binned to at most 512 columns and 512 views, every integer shift
///     (half-pixel steps of the binned axis) over the search range.
///  2. Fine: full resolution (at most 1024 views), shifts of a quarter pixel (an eighth of a
///     pixel in the column) within one binned pixel plus one pixel of the coarse minimum,
///     the mirrored copy interpolated by Catmull-Rom; a parabola through the lowest metric and
///     its neighbours gives the column.
/// Confidence, from the coarse metric minus its running median over +-4 pixels (which keeps the
/// dips and drops the slow swell of the curve): 1 - r2 / r1 clamped to [0, 1], r1 the depth of
/// the dip at the estimate and r2 that of the deepest other dip at least 3 pixels away: near 1
/// for a single clear dip, 0 when another column fits as well. Measured: 0.6 .. 0.9 on
/// simulated scans (objects inside or wider than the field of view, rings) and 0.78 on the
/// tooth; 0.26 with half the views shifted by 20 px, 0 on noise. Rings (stripes in the
/// sinogram) put their energy at n = 0, outside the wedge.
/// Parallel beams over 360 degrees whose views pair as a half acquisition's do (view v + views/2
/// half a turn after view v; an odd count whose last view repeats the first) are searched over
/// the whole width first, by find_center_360 (include/ctforge/preprocess.hpp): when its axis lies
/// outside the middle half (the axis near one edge, the object wider than the detector: a half
/// acquisition) that estimate is the answer, with its confidence and curve (method
/// "half-acquisition"); otherwise Vo's method decides, as for any other scan.
/// Fan / cone beams (and parallel scans short of 180 degrees or unevenly spaced) use the
/// opposite-view registration of estimate_center_of_rotation instead; its confidence is the
/// fraction of view pairs whose own estimate lies within 1 pixel of the median.
/// Throws usage_error as estimate_center_of_rotation does.
center_estimate find_center_of_rotation(const projection_view& proj, const geometry& g,
                                        const center_search_options& opt = {});

/// Most candidates reconstruct_center_candidates and `ctforge center --range` take.
inline constexpr std::int64_t max_center_candidates = 200;

/// One slice per candidate axis column, for choosing the centre by eye (tomopy's write_center):
/// FBP (parallel beams) or FDK (fan / cone beams) of the plane through detector row `row` at the
/// axis, with the axis on each of `columns` in turn (with_center_of_rotation), on a size x size
/// grid covering the detector's field of view (size 0: min(cols, 512)). Slices stacked along z in
/// the order of `columns`: [candidate][y][x]. Needs a circular geometry; pass the detector rows
/// near `row` only (one row suffices for parallel beams). Throws usage_error for an empty or too
/// long list (more than max_center_candidates), a column off the detector or a row off it.
volume reconstruct_center_candidates(const projection_view& proj, const geometry& g,
                                     std::int64_t row, std::span<const double> columns,
                                     std::int64_t size = 0, int threads = 0);

/// Copy of `g` with the detector shifted along u so that the rotation axis projects onto column
/// `col`: circular geometries get offset_u = ((cols - 1) / 2 - col) * du for every view; vector
/// geometries move each detector centre along u accordingly.
geometry with_center_of_rotation(const geometry& g, double col);

}  // namespace ctforge
