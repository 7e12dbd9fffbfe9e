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


}  // namespace ctforge::io

#include "ctforge/detail/atomic_write.hpp"
