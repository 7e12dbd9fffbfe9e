// HDF5 files read from S3 and S3-compatible object stores (s3://bucket/key) by ranged GETs,
// through HDF5's read-only S3 driver (ROS3). The endpoint, region and credentials come from the
// usual environment variables:
//   AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (a compatible store, addressed path-style:
//   <endpoint>/<bucket>/<key>); otherwise https://<bucket>.s3.<region>.amazonaws.com/<key>;
//   AWS_REGION or AWS_DEFAULT_REGION (default us-east-1);
//   AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (signed requests; none: anonymous, for public
//   buckets), AWS_SESSION_TOKEN (temporary credentials: HDF5 1.14 or later).
#pragma once

#include <hdf5.h>

#include <string>
#include <string_view>

namespace ctforge::io {

/// Whether `path` names an object in a store (s3://...).
bool is_object_url(std::string_view path);

/// Where the read-only S3 driver finds s3://bucket/key, and how it signs its requests.
struct s3_object {
  std::string url;     ///< http(s) address of the object
  std::string bucket_url;  ///< http(s) address of its bucket (requests with a query: listing)
  std::string bucket, key;  ///< as the s3:// URL spells them (the key not encoded)
  std::string region;  ///< signing region
  std::string key_id, secret, token;
};

/// s3://bucket/key resolved with the environment (usage_error naming the URL when it has no
/// bucket or no key).
s3_object resolve_s3_object(const std::string& s3_url);

/// H5Fopen of s3://bucket/key, read-only, through the read-only S3 driver (error naming the URL
/// and the address tried when the object cannot be opened, or when this HDF5 has no such
/// driver).
hid_t open_s3_hdf5(const std::string& s3_url);

}  // namespace ctforge::io
