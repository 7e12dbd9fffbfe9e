// Parallel chunk coding for HDF5 float datasets (internal; used by io/h5.hpp).
//
// libhdf5 inflates and deflates chunks one at a time on the calling thread, which makes reading
// and writing our own compressed files (shuffle + deflate) slower than reconstructing them. For
// float32 datasets whose filter pipeline is at most byte-shuffle followed by deflate, these
// functions move the raw chunks through libhdf5 (H5Dread_chunk / H5Dwrite_chunk, one thread) and
// run the shuffle and the deflate stream coding in parallel with libdeflate, which produces and
// accepts exactly the zlib streams HDF5's deflate filter does. Files stay readable by any HDF5
// reader (h5py, HDFView, h5dump) and the values are bit-identical to H5Dread / H5Dwrite.
//
// Anything else (other types, filters, contiguous storage, unallocated chunks, a write that
// covers chunks only partly) is declined and the caller goes through H5Dread / H5Dwrite.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

namespace ctforge::detail::h5 {

/// Reads the block [start, start + count) of the chunked float32 dataset `dset` into `out`
/// (row-major, product of count elements), decoding the chunks with `threads` threads (0: all).
/// Returns false, having read nothing, when the dataset does not qualify (see above). Throws
/// ctforge::error naming `context` and the chunk when a chunk cannot be read or decoded.
bool read_float_chunks(hid_t dset, const std::vector<hsize_t>& start,
                       const std::vector<hsize_t>& count, float* out, const std::string& context,
                       int threads = 0);

/// Writes the block [start, start + count) of `dset` from `in` (row-major), encoding whole
/// chunks in parallel. Qualifies only when the block covers every chunk it touches (edges of the
/// dataset included); returns false, having written nothing, otherwise.
bool write_float_chunks(hid_t dset, const std::vector<hsize_t>& start,
                        const std::vector<hsize_t>& count, const float* in,
                        const std::string& context, int threads = 0);

}  // namespace ctforge::detail::h5
