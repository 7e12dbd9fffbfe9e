// Native HDF5 files and PNG previews. No HDF5 types are exposed.
//
// Projection file: /projections float32 [views][rows][cols] (line integrals),
//                  /geometry scalar string dataset holding the geometry JSON.
// Volume file:     /volume float32 [z][y][x] with attributes spacing_mm and origin_mm
//                  (3 doubles each, x, y, z order; origin = centre of voxel (0,0,0)).
// Every writer goes through the output layer (detail/atomic_write.hpp): a unique temporary in
// the same directory, every write checked, flushed and renamed over `path` only when complete,
// so a failed or interrupted run never leaves a file that looks complete and never touches an
// earlier output.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::io {

struct projection_file {
  projection_stack projections;
  std::optional<geometry> geom;  ///< absent when the file has no /geometry dataset
  std::string geometry_json;     ///< raw JSON text (empty when absent)
};

/// Reads /projections (and /geometry when present). Throws error naming the file and dataset
/// when the file is missing, not HDF5, lacks the dataset, has the wrong rank or type, or holds
/// non-finite values.
projection_file read_projections(const std::string& path);
void write_projections(const std::string& path, const projection_view& p, const geometry& g);

volume read_volume(const std::string& path);
void write_volume(const std::string& path, const volume_view& v);

/// Receives a volume's z-planes a few at a time and publishes the output once every plane is
/// there: volume_file_writer (.h5) and io::zarr_volume_writer (.zarr, formats.hpp). Destroyed
/// without commit() it leaves no output and any earlier one untouched.
class plane_writer {
 public:
  virtual ~plane_writer() = default;
  /// Writes planes [k0, k0 + n) from `planes` ([n][ny][nx] floats, n >= 1, any order of
  /// calls). Non-finite values are refused (error naming the file and the voxel).
  virtual void write_planes(std::int64_t k0, std::span<const float> planes) = 0;
  /// Every plane written: flushed to the device and put in place.
  virtual void commit() = 0;
};

/// A native HDF5 volume file written a few z-planes at a time, for volumes that need not fit
/// in memory (slab-wise and distributed reconstructions). The file is built under a unique
/// temporary name in the destination directory with the volume's whole size reserved at once
/// (a full disk is an error at construction, naming the file), each plane written with
/// checked writes; commit() checks that every plane was written, flushes and renames it over
/// `path`. Destroyed without commit() (an error, an interruption) it removes the temporary and
/// leaves any earlier file of that name untouched. Uncompressed (contiguous) storage.
class volume_file_writer : public plane_writer {
 public:
  volume_file_writer(const std::string& path, const volume_geometry& g);
  ~volume_file_writer() override;
  volume_file_writer(const volume_file_writer&) = delete;
  volume_file_writer& operator=(const volume_file_writer&) = delete;

  void write_planes(std::int64_t k0, std::span<const float> planes) override;
  /// Every plane written: flushed to the device and renamed into place.
  void commit() override;
  const std::string& path() const noexcept;

  /// Where other processes write planes themselves (write_volume_part): the temporary file
  /// (in the destination directory, so on the file system they share) and the byte offset of
  /// the data. mark_written records planes [k0, k0 + n) as written by them (commit() checks
  /// that every plane was written, by this object or marked).
  const std::string& temporary_path() const noexcept;
  std::uint64_t data_offset() const noexcept;
  void mark_written(std::int64_t k0, std::int64_t n);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Writes planes [k0, k0 + n) of a volume_file_writer's file from another process (a worker
/// of a distributed run on the file system the writer's directory is on): `temporary` and
/// `data_offset` as the writer gives them, `g` its grid. Checked writes at the planes' offset,
/// then fsync; the file must already hold the reserved data (a file of another size is refused,
/// naming it). Non-finite values are refused. Writing the same planes twice writes the same
/// bytes (a unit's late duplicate is harmless).
void write_volume_part(const std::string& temporary, std::uint64_t data_offset,
                       const volume_geometry& g, std::int64_t k0, std::span<const float> planes);

/// Short human-readable description of any ctforge HDF5 file (datasets, shapes, value range,
/// geometry summary, volume spacing/origin).
std::string describe_file(const std::string& path);

/// Writes the three central orthogonal slices (axial z, coronal y, sagittal x) side by side as
/// an 8-bit grey PNG (+y and +z up), windowed to [lo, hi] (lo == hi: the volume's 0.5 / 99.5
/// percentiles). A single-slice volume (nz = 1) gives the axial panel only.
void write_preview_png(const std::string& path, const volume_view& v, float lo = 0, float hi = 0);

// ---- object storage (s3://bucket/key) ----------------------------------------------------------
//
// Copies between local files and S3 or S3-compatible stores, for formats that are not read or
// written in place (HDF5 files are read in place by ranged requests wherever a file name is
// taken). Endpoint, region and credentials from AWS_ENDPOINT_URL(_S3), AWS_REGION /
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; requests
// signed with AWS Signature Version 4; errors (ctforge::error) name the URL, the request and the
// store's answer.

/// The last non-empty component of the URL's key ("vol.zarr" for s3://b/run/vol.zarr/): the
/// name of the local file or directory it is downloaded to.
std::string object_name(const std::string& url);

/// The object `url` (with the data file a detached .mhd / .nhdr header names, a sibling key), or
/// else every object under the prefix `url`/ (a Zarr array, a TIFF stack, a DICOM series; keys
/// ending in '/', folder markers, are skipped),
/// copied into the existing directory `dir`; returns the local path
/// (dir/object_name(url)). error naming the URL when there is neither, and for keys under the
/// prefix that cannot be a relative path (an empty or a '..' component).
std::string download(const std::string& url, const std::string& dir);

/// A local file stored as the object `url` (one PUT, or a multipart upload above 64 MiB or
/// CTFORGE_S3_PART_SIZE bytes: the object appears whole when it completes), or a local
/// directory stored as one object per file under `url`/. A directory's top-level Zarr metadata
/// (zarr.json, .zarray, .zattrs, .zgroup) goes last, and a Zarr array marked complete
/// (attribute ctforge_complete true) is first stored marked incomplete: readers of the URL see
/// an unfinished array until every chunk is there. Objects an earlier output left under the
/// prefix that this one does not have are removed afterwards (keys ending in '/', folder
/// markers, are kept). Each object's size is checked after its upload (unless the
/// credentials may not read it).
void upload(const std::string& local, const std::string& url);


}  // namespace ctforge::io

#include "ctforge/detail/atomic_write.hpp"
