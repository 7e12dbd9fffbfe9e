// What the HDF5 projection readers (DataExchange: src/io/dxchange.cpp, NXtomo:
// src/io/nxtomo.cpp) share: the checks of the frames dataset, the selected part of it, the
// frames read by hyperslab and the flat / dark fields of a dataset holding one image or several.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctforge/formats.hpp"
#include "io/h5.hpp"

namespace ctforge::io {

/// The selected part of the stored scan: views [v0, v0 + nv), rows [r0, r0 + nr), columns
/// [c0, c0 + nc).
struct frame_window {
  std::int64_t v0 = 0, nv = 0, r0 = 0, nr = 0, c0 = 0, nc = 0;
};

/// The frames dataset `name` of `f`, checked: rank 3, numeric, not empty (error naming `path`
/// and the dataset). `axis` is what its first axis counts ("views", "frames").
detail::h5::dataset open_frames_dataset(const detail::h5::file& f, const std::string& path,
                                        const std::string& name, const char* axis);

/// Fills the stored sizes of `s` (`views` projections of the rows x cols of `data`) and
/// whether the frames are integers, and resolves the selection against them (usage_error
/// naming the option and `path` for a range outside).
frame_window start_scan(raw_scan& s, const detail::h5::dataset& data, std::int64_t views,
                        const detector_selection& sel, const std::string& path);

/// The frames [first, first + count) of the rank-3 dataset `d`, on the rows and columns of `w`:
/// one hyperslab, the memory checked first.
projection_stack read_frames(const detail::h5::dataset& d, std::int64_t first, std::int64_t count,
                             const frame_window& w);
/// The frames `idx` (ascending) of the rank-3 dataset `d`, on the rows and columns of `w`: one
/// hyperslab per run of consecutive frames, the memory checked first.
projection_stack read_frames(const detail::h5::dataset& d, const std::vector<std::int64_t>& idx,
                             const frame_window& w);

/// Flat or dark fields from the dataset `name` of `f`: one image [rows][cols] or frames
/// [n][rows][cols] on the detector of `s` (error naming `path`, the dataset and, after "like",
/// what the detector is taken from), on the rows and columns of `w`.
projection_stack read_field_frames(const detail::h5::file& f, const std::string& path,
                                   const std::string& name, const raw_scan& s,
                                   const frame_window& w, const std::string& like);

}  // namespace ctforge::io
