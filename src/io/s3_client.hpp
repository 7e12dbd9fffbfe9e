// Objects in S3 and S3-compatible stores (s3://bucket/key) read, written and listed through
// libcurl, its requests signed with AWS Signature Version 4 by libcurl itself. The
// endpoint, region and credentials come from the environment as for HDF5's ranged reads
// (src/io/object_store.hpp). Payloads are sent unsigned (x-amz-content-sha256: UNSIGNED-PAYLOAD,
// which S3 and its compatibles accept); every upload is checked afterwards by its size.
//
// Errors are ctforge::error naming the s3:// URL, the request (method and address) and the
// store's answer: HTTP status, S3 error code and message, or libcurl's reason. Requests that
// fail with a 5xx status, 429, 400 RequestTimeout or an interrupted connection are tried five
// times, 0.25 to 2 s apart (exponential backoff with jitter).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ctforge::io::s3 {

/// Bytes per part of a multipart upload: CTFORGE_S3_PART_SIZE when set (5 MiB to 5 GiB, the
/// store's smallest and largest part), else 64 MiB. Larger files are sent in such parts, or in
/// larger ones beyond 10000 parts (S3's most).
std::int64_t part_size();

/// What HEAD says of an object: its size (-1: there is none) and its ETag (the store's tag of
/// its content: changes when the object is replaced by other bytes).
struct object_info {
  std::int64_t size = -1;
  std::string etag;
};

/// One connection to the store (reused from request to request); not shared between threads.
class client {
 public:
  client();
  ~client();
  client(client&&) noexcept;
  client& operator=(client&&) noexcept;

  /// The object's size in bytes, or -1 when there is no such object.
  std::int64_t size(const std::string& url);
  /// Its size and ETag.
  object_info info(const std::string& url);
  /// The object written into `file` (created or replaced); error when there is none.
  void get_file(const std::string& url, const std::string& file);
  /// `file` stored as the object: one PUT up to part_size(), else a multipart upload (the
  /// object appears whole when the upload completes; an earlier one stays until then). Its
  /// size as stored is checked afterwards (not when the credentials may not read it).
  void put_file(const std::string& url, const std::string& file);
  void put_text(const std::string& url, std::string_view text);
  /// The s3:// URLs of every object whose key starts with the URL's key, all pages.
  std::vector<std::string> list(const std::string& prefix_url);
  /// Removes the object (nothing happens when there is none).
  void remove(const std::string& url);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace ctforge::io::s3
