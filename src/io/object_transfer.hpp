// Files and directories copied between this machine and S3 or an S3-compatible store
// (src/io/s3_client.hpp): what the command line uses for s3:// inputs that are not read in
// place and for every s3:// output, staged in a local temporary directory.
#pragma once

#include <string>

namespace ctforge::io {

/// The last non-empty component of the URL's key ("vol.zarr" for s3://b/run/vol.zarr/): the
/// name of the local file or directory it is downloaded to.
std::string object_name(const std::string& url);

/// The object `url`, or else every object under the prefix `url`/ (a Zarr array, a TIFF stack,
/// a DICOM series), copied into the existing directory `dir`; returns the local path
/// (dir/<the key's last name>). error naming the URL when there is neither, and for keys under
/// the prefix that cannot be a relative path (an empty or a '..' component).
std::string download(const std::string& url, const std::string& dir);

/// A local file stored as the object `url`, or a local directory stored as one object per file
/// under `url`/. A directory's top-level Zarr metadata (zarr.json, .zarray, .zattrs, .zgroup)
/// goes last, and a Zarr array marked complete (attribute ctforge_complete true) is first
/// stored marked incomplete: readers of the URL see an unfinished array until every chunk is
/// there (on a store nothing can be renamed; the metadata is the commit).
void upload(const std::string& local, const std::string& url);

}  // namespace ctforge::io
