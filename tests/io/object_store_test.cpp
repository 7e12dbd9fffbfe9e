// s3:// URLs resolved for HDF5's read-only S3 driver (src/io/object_store.hpp): a compatible
// store's endpoint path-style, AWS's virtual-hosted address otherwise, keys percent-encoded,
// malformed URLs refused naming them. (Reading through the driver is tested against a moto
// server in python/tests/test_object_store_inputs.py.)
#include "io/object_store.hpp"

#include <gtest/gtest.h>

#include "io/s3_client.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "ctforge/error.hpp"
#include "test_support.hpp"

namespace ctforge::io {
namespace {

using env_map = std::map<std::string, std::optional<std::string>>;

/// Sets the AWS_* variables for the test's scope, restoring them after.
class aws_env {
 public:
  explicit aws_env(const env_map& values) {
    for (const char* k : {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
                          "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                          "AWS_SESSION_TOKEN"}) {
      const char* v = std::getenv(k);
      saved_[k] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(k);
    }
    for (const auto& [k, v] : values)
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
  }
  ~aws_env() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(ObjectStore, AwsAddressFromTheRegion) {
  const aws_env env(env_map{{"AWS_DEFAULT_REGION", "eu-west-3"}, {"AWS_ACCESS_KEY_ID", "AKIA"},
                     {"AWS_SECRET_ACCESS_KEY", "s"}});
  const s3_object o = resolve_s3_object("s3://beamline/2026/scan_01.h5");
  EXPECT_EQ(o.url, "https://beamline.s3.eu-west-3.amazonaws.com/2026/scan_01.h5");
  EXPECT_EQ(o.region, "eu-west-3");
  EXPECT_EQ(o.key_id, "AKIA");
  EXPECT_TRUE(o.token.empty());
  // Listing goes to the bucket's own address (virtual-hosted: the bucket is in the host).
  EXPECT_EQ(o.bucket_url, "https://beamline.s3.eu-west-3.amazonaws.com/");
  EXPECT_EQ(o.bucket, "beamline");
  EXPECT_EQ(o.key, "2026/scan_01.h5");
}

TEST(ObjectStore, CompatibleEndpointPathStyleAndKeysEncoded) {
  const aws_env env(env_map{{"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"},
                     {"AWS_ENDPOINT_URL_S3", std::nullopt},
                     {"AWS_REGION", "us-west-2"}});
  EXPECT_EQ(resolve_s3_object("s3://b1/a dir/x+y#1.h5").url,
            "http://127.0.0.1:9000/b1/a%20dir/x%2By%231.h5");
  EXPECT_EQ(resolve_s3_object("s3://b1/k").region, "us-west-2");
  const s3_object o = resolve_s3_object("s3://b1/a dir/x.zarr/");
  EXPECT_EQ(o.bucket_url, "http://127.0.0.1:9000/b1");
  EXPECT_EQ(o.key, "a dir/x.zarr/");  // as the URL spells it; encoded only in o.url
}

TEST(ObjectStore, PartSizeFromTheEnvironment) {
  const char* saved = std::getenv("CTFORGE_S3_PART_SIZE");
  const std::optional<std::string> keep = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::unsetenv("CTFORGE_S3_PART_SIZE");
  EXPECT_EQ(s3::part_size(), std::int64_t{64} << 20);
  ::setenv("CTFORGE_S3_PART_SIZE", "5242880", 1);
  EXPECT_EQ(s3::part_size(), std::int64_t{5} << 20);
  for (const char* bad : {"5242879", "8M", "-1", "1e9", "5368709121"}) {
    ::setenv("CTFORGE_S3_PART_SIZE", bad, 1);
    testing::expect_error_naming([] { s3::part_size(); }, "CTFORGE_S3_PART_SIZE", "5 MiB");
  }
  if (keep)
    ::setenv("CTFORGE_S3_PART_SIZE", keep->c_str(), 1);
  else
    ::unsetenv("CTFORGE_S3_PART_SIZE");
}

TEST(ObjectStore, AStoreThatCannotBeReachedIsAnErrorNamingTheRequest) {
  // Port 9 on loopback: nothing listens (connection refused), tried five times.
  const aws_env env(env_map{{"AWS_ENDPOINT_URL", "http://127.0.0.1:9"}});
  s3::client store;
  testing::expect_error_naming([&] { store.put_text("s3://b1/k.json", "{}"); }, "s3://b1/k.json",
                               "PUT http://127.0.0.1:9/b1/k.json");
}

TEST(ObjectStore, TheS3EndpointWinsAndUsEast1ByDefault) {
  const aws_env env(env_map{{"AWS_ENDPOINT_URL", "http://a:1"}, {"AWS_ENDPOINT_URL_S3", "http://b:2"}});
  const s3_object o = resolve_s3_object("s3://b1/k.h5");
  EXPECT_EQ(o.url, "http://b:2/b1/k.h5");
  EXPECT_EQ(o.region, "us-east-1");
}

TEST(ObjectStore, MalformedUrlsRefusedNamingThem) {
  const aws_env env(env_map{});
  EXPECT_TRUE(is_object_url("s3://b/k"));
  EXPECT_FALSE(is_object_url("/data/s3://b/k"));
  for (const char* bad : {"s3://bucket", "s3://bucket/", "s3:///key"})
    testing::expect_error_naming([&] { resolve_s3_object(bad); }, bad, "s3://bucket/key");
  // Opening an object that is not there names the URL and the address tried.
  const aws_env local(env_map{{"AWS_ENDPOINT_URL", "http://127.0.0.1:9"}});
  testing::expect_error_naming([] { ::hid_t f = open_s3_hdf5("s3://b1/none.h5"); (void)f; },
                               "s3://b1/none.h5", "http://127.0.0.1:9/b1/none.h5");
}

}  // namespace
}  // namespace ctforge::io
