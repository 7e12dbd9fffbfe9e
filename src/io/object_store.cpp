// s3:// objects read through HDF5's read-only S3 driver (src/io/object_store.hpp).
#include "io/object_store.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "ctforge/error.hpp"

namespace ctforge::io {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// The key with every byte outside the unreserved set and '/' percent-encoded (RFC 3986).
std::string encode_key(std::string_view key) {
  std::string out;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/')
      out += ch;
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

bool is_object_url(std::string_view path) {
  return path.starts_with("s3://");
}

s3_object resolve_s3_object(const std::string& s3_url) {
  CTFORGE_EXPECTS(is_object_url(s3_url), s3_url + ": not an s3:// URL");
  const std::string_view rest = std::string_view(s3_url).substr(5);
  const std::size_t slash = rest.find('/');
  CTFORGE_EXPECTS(slash != std::string_view::npos && slash > 0 && slash + 1 < rest.size(),
                  s3_url + ": expected s3://bucket/key");
  s3_object o;
  o.bucket = std::string(rest.substr(0, slash));
  o.key = std::string(rest.substr(slash + 1));
  const std::string& bucket = o.bucket;
  const std::string key = encode_key(o.key);
  o.region = env("AWS_REGION");
  if (o.region.empty()) o.region = env("AWS_DEFAULT_REGION");
  if (o.region.empty()) o.region = "us-east-1";
  std::string endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  o.bucket_url = endpoint.empty() ? fmt::format("https://{}.s3.{}.amazonaws.com/", bucket, o.region)
                                  : fmt::format("{}/{}", endpoint, bucket);
  o.url = endpoint.empty() ? o.bucket_url + key : fmt::format("{}/{}", o.bucket_url, key);
  o.key_id = env("AWS_ACCESS_KEY_ID");
  o.secret = env("AWS_SECRET_ACCESS_KEY");
  o.token = env("AWS_SESSION_TOKEN");
  return o;
}

#if defined(H5_HAVE_ROS3_VFD)
hid_t open_s3_hdf5(const std::string& s3_url) {
  const s3_object o = resolve_s3_object(s3_url);
  H5FD_ros3_fapl_t fa{};
  fa.version = H5FD_CURR_ROS3_FAPL_T_VERSION;
  fa.authenticate = !o.key_id.empty() && !o.secret.empty();
  CTFORGE_EXPECTS(o.region.size() < sizeof fa.aws_region && o.key_id.size() < sizeof fa.secret_id &&
                      o.secret.size() < sizeof fa.secret_key,
                  s3_url + ": AWS_REGION, AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY too long for "
                           "HDF5's S3 driver");
  std::strncpy(fa.aws_region, o.region.c_str(), sizeof fa.aws_region - 1);
  std::strncpy(fa.secret_id, o.key_id.c_str(), sizeof fa.secret_id - 1);
  std::strncpy(fa.secret_key, o.secret.c_str(), sizeof fa.secret_key - 1);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  CTFORGE_CHECK(fapl >= 0, s3_url + ": H5Pcreate failed");
  const auto close_fapl = [&] { H5Pclose(fapl); };
  if (H5Pset_fapl_ros3(fapl, &fa) < 0) {
    close_fapl();
    CTFORGE_FAIL(s3_url + ": H5Pset_fapl_ros3 failed");
  }
#if H5_VERSION_GE(1, 14, 0)
  if (fa.authenticate && !o.token.empty() && H5Pset_fapl_ros3_token(fapl, o.token.c_str()) < 0) {
    close_fapl();
    CTFORGE_FAIL(s3_url + ": H5Pset_fapl_ros3_token failed");
  }
#else
  if (fa.authenticate && !o.token.empty()) {
    close_fapl();
    throw usage_error(fmt::format(
        "{}: AWS_SESSION_TOKEN is set (temporary credentials), which HDF5 {}.{}.{}'s S3 driver "
        "cannot send (1.14 can); use a key without a session token, or copy the file locally",
        s3_url, H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE));
  }
#endif
  const hid_t f = H5Fopen(o.url.c_str(), H5F_ACC_RDONLY, fapl);
  close_fapl();
  CTFORGE_CHECK(f >= 0,
                fmt::format("{}: cannot open it as an HDF5 file at {} (H5Fopen with the read-only "
                            "S3 driver, region {}, {}): no such object, no access, or not HDF5",
                            s3_url, o.url, o.region,
                            fa.authenticate ? "signed with AWS_ACCESS_KEY_ID"
                                            : "unsigned: no AWS_ACCESS_KEY_ID / "
                                              "AWS_SECRET_ACCESS_KEY"));
  return f;
}
#else
hid_t open_s3_hdf5(const std::string& s3_url) {
  throw error(s3_url + ": this build's HDF5 has no read-only S3 driver (ROS3); copy the file "
                       "locally, or build with an HDF5 configured --enable-ros3-vfd");
}
#endif

}  // namespace ctforge::io
