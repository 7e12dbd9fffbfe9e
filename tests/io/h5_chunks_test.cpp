// Parallel chunk coding of HDF5 float datasets (io/h5_chunks.hpp): bit-identical to libhdf5's
// own H5Dread / H5Dwrite in both directions, on every shape, chunk shape and filter pipeline it
// accepts; declines what it does not handle; names the chunk of a corrupt file.
#include "io/h5_chunks.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "io/h5.hpp"
#include "test_support.hpp"

namespace h5 = ctforge::detail::h5;
namespace fs = std::filesystem;

namespace {

struct chunk_case {
  h5::dims_t dims, chunk;
  bool shuffle = true;
  int deflate = 1;
};

std::string label(const chunk_case& c) {
  std::string s;
  for (auto d : c.dims) s += std::to_string(d) + "x";
  s += "_chunk";
  for (auto d : c.chunk) s += std::to_string(d) + "x";
  s += c.shuffle ? "_shuffle" : "";
  s += "_deflate" + std::to_string(c.deflate);
  return s;
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  // Smooth plus noise, like projections: compressible, but not trivially.
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.01f * static_cast<float>(i)) + 0.01f * d(rng);
  return v;
}

std::size_t count_of(const h5::dims_t& d) {
  std::size_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

/// A dataset made with libhdf5's own filters (and H5Dwrite, not the parallel path).
h5::dataset make_reference(const h5::file& f, const chunk_case& c, const std::vector<float>& v) {
  h5::create_options o;
  o.chunk = c.chunk;
  o.shuffle = c.shuffle;
  o.deflate = c.deflate;
  h5::dataset d = f.create_dataset<float>("/ref", c.dims, o);
  h5::check(H5Dwrite(d.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
            d.context(), "H5Dwrite");
  return d;
}

/// The block [s, s + n) of a row-major array of shape `dims`.
std::vector<float> block_of(const std::vector<float>& v, const h5::dims_t& dims,
                            const h5::dims_t& s, const h5::dims_t& n) {
  std::vector<float> out(count_of(n));
  std::vector<hsize_t> idx(dims.size(), 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    std::size_t rem = k, flat = 0;
    for (std::size_t i = dims.size(); i-- > 0;) {
      idx[i] = rem % n[i];
      rem /= n[i];
    }
    for (std::size_t i = 0; i < dims.size(); ++i) flat = flat * dims[i] + s[i] + idx[i];
    out[k] = v[flat];
  }
  return out;
}

class H5Chunks : public ::testing::TestWithParam<chunk_case> {
 protected:
  fs::path dir = ctforge::testing::scratch_dir("h5_chunks", label(GetParam()));
};

TEST_P(H5Chunks, ReadsWhatLibhdf5WroteBitForBit) {
  const chunk_case& c = GetParam();
  const std::vector<float> v = random_values(count_of(c.dims), 7);
  h5::file f = h5::file::create((dir / "a.h5").string());
  const h5::dataset d = make_reference(f, c, v);
  for (int threads : {1, 2, 3}) {
    std::vector<float> got(v.size(), -1.0f);
    ASSERT_TRUE(h5::read_float_chunks(d.id(), h5::dims_t(c.dims.size(), 0), c.dims, got.data(),
                                      d.context(), threads));
    EXPECT_EQ(got, v) << threads << " threads";
  }
  // Blocks that start and end inside chunks.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    h5::dims_t s(c.dims.size()), n(c.dims.size());
    for (std::size_t i = 0; i < c.dims.size(); ++i) {
      s[i] = std::uniform_int_distribution<hsize_t>(0, c.dims[i] - 1)(rng);
      n[i] = std::uniform_int_distribution<hsize_t>(1, c.dims[i] - s[i])(rng);
    }
    std::vector<float> got(count_of(n), -1.0f);
    ASSERT_TRUE(h5::read_float_chunks(d.id(), s, n, got.data(), d.context(), 2));
    EXPECT_EQ(got, block_of(v, c.dims, s, n));
    // The wrapper's read_slab takes the same path and agrees.
    std::vector<float> via_wrapper(got.size());
    d.read_slab<float>(s, n, std::span<float>(via_wrapper));
    EXPECT_EQ(via_wrapper, got);
  }
}

TEST_P(H5Chunks, WritesWhatLibhdf5ReadsBitForBit) {
  const chunk_case& c = GetParam();
  const std::vector<float> v = random_values(count_of(c.dims), 11);
  h5::file f = h5::file::create((dir / "b.h5").string());
  h5::create_options o;
  o.chunk = c.chunk;
  o.shuffle = c.shuffle;
  o.deflate = c.deflate;
  const h5::dataset d = f.create_dataset<float>("/out", c.dims, o);
  ASSERT_TRUE(
      h5::write_float_chunks(d.id(), h5::dims_t(c.dims.size(), 0), c.dims, v.data(), d.context(), 2));
  std::vector<float> back(v.size(), -1.0f);
  h5::check(H5Dread(d.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()),
            d.context(), "H5Dread");
  EXPECT_EQ(back, v);
  // Chunk-aligned slabs along the first axis (the streamed volume writer's pattern).
  const h5::dataset e = f.create_dataset<float>("/slabs", c.dims, o);
  for (hsize_t z0 = 0; z0 < c.dims[0]; z0 += c.chunk[0]) {
    h5::dims_t s(c.dims.size(), 0), n = c.dims;
    s[0] = z0;
    n[0] = std::min(c.chunk[0], c.dims[0] - z0);
    const std::vector<float> part = block_of(v, c.dims, s, n);
    ASSERT_TRUE(h5::write_float_chunks(e.id(), s, n, part.data(), e.context(), 2));
  }
  std::fill(back.begin(), back.end(), -1.0f);
  h5::check(H5Dread(e.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()),
            e.context(), "H5Dread");
  EXPECT_EQ(back, v);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, H5Chunks,
    ::testing::Values(chunk_case{{7}, {3}}, chunk_case{{1, 1, 1}, {1, 1, 1}},
                      chunk_case{{5, 3, 11}, {2, 3, 4}}, chunk_case{{4, 1, 9}, {4, 1, 9}},
                      chunk_case{{3, 37, 5}, {1, 16, 5}},            // projections: 16-row bands
                      chunk_case{{9, 13, 13}, {8, 13, 13}, true, 1},  // volumes: 8-slice chunks
                      chunk_case{{5, 3, 11}, {2, 3, 4}, false, 6},    // deflate alone
                      chunk_case{{5, 3, 11}, {2, 3, 4}, true, 0},     // shuffle alone
                      chunk_case{{6, 10}, {4, 4}, false, 0}),         // chunked, unfiltered
    [](const ::testing::TestParamInfo<chunk_case>& i) { return label(i.param); });

class H5ChunksDecline : public ::testing::Test {
 protected:
  fs::path dir = ctforge::testing::scratch_dir(
      "h5_chunks", ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(H5ChunksDecline, WhatItDoesNotHandleIsLeftToLibhdf5) {
  h5::file f = h5::file::create((dir / "c.h5").string());
  const h5::dims_t dims{4, 6};
  std::vector<float> v = random_values(24, 1), got(24);
  const h5::dims_t zero{0, 0};
  // Contiguous storage.
  const h5::dataset plain = f.write_dataset<float>("/plain", dims, std::span<const float>(v));
  EXPECT_FALSE(h5::read_float_chunks(plain.id(), zero, dims, got.data(), plain.context()));
  // Another stored type.
  h5::create_options o;
  o.chunk = {2, 3};
  o.deflate = 1;
  std::vector<double> vd(v.begin(), v.end());
  const h5::dataset dbl = f.write_dataset<double>("/double", dims, std::span<const double>(vd), o);
  EXPECT_FALSE(h5::read_float_chunks(dbl.id(), zero, dims, got.data(), dbl.context()));
  // Another filter (Fletcher-32 checksums).
  {
    h5::plist_id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 2, o.chunk.data());
    H5Pset_fletcher32(dcpl.get());
    h5::dataspace_id sp(H5Screate_simple(2, dims.data(), nullptr));
    h5::dataset_id id(H5Dcreate2(f.id(), "/fletcher", H5T_IEEE_F32LE, sp.get(), H5P_DEFAULT,
                                 dcpl.get(), H5P_DEFAULT));
    ASSERT_TRUE(id);
    ASSERT_GE(H5Dwrite(id.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    EXPECT_FALSE(h5::read_float_chunks(id.get(), zero, dims, got.data(), "fletcher"));
    EXPECT_FALSE(h5::write_float_chunks(id.get(), zero, dims, v.data(), "fletcher"));
  }
  // A write covering a chunk only in part.
  const h5::dataset d = f.create_dataset<float>("/chunked", dims, o);
  std::vector<float> part(3 * 6);
  EXPECT_FALSE(h5::write_float_chunks(d.id(), {1, 0}, {3, 6}, part.data(), d.context()));
  // Chunks never written (fill values): declined, and the wrapper reads the fill value 0.
  EXPECT_FALSE(h5::read_float_chunks(d.id(), zero, dims, got.data(), d.context()));
  d.read<float>(std::span<float>(got));
  for (float x : got) EXPECT_EQ(x, 0.0f);
  // Half written: the wrapper (through libhdf5) returns values and fill values.
  const std::vector<float> top(12, 5.0f);
  ASSERT_TRUE(h5::write_float_chunks(d.id(), {0, 0}, {2, 6}, top.data(), d.context()));
  d.read<float>(std::span<float>(got));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i < 12 ? 5.0f : 0.0f) << i;
}

TEST_F(H5ChunksDecline, ACorruptChunkIsAnErrorNamingIt) {
  h5::file f = h5::file::create((dir / "d.h5").string());
  const h5::dims_t dims{4, 6};
  h5::create_options o;
  o.chunk = {2, 6};
  o.deflate = 1;
  o.shuffle = true;
  const std::vector<float> v = random_values(24, 2);
  const h5::dataset d = f.write_dataset<float>("/vol", dims, std::span<const float>(v), o);
  // Replace the second chunk's stream by bytes that are not a deflate stream.
  const std::vector<unsigned char> junk(40, 0xAB);
  const hsize_t second[2] = {2, 0};
  ASSERT_GE(H5Dwrite_chunk(d.id(), H5P_DEFAULT, 0, second, junk.size(), junk.data()), 0);
  std::vector<float> got(24);
  try {
    (void)h5::read_float_chunks(d.id(), {0, 0}, dims, got.data(), d.context(), 2);
    FAIL() << "a corrupt chunk was read without an error";
  } catch (const ctforge::error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dataset /vol"), std::string::npos) << m;
    EXPECT_NE(m.find("chunk at [2][0]"), std::string::npos) << m;
  }
  // A stored size no deflate stream of the chunk could have: refused before it is read.
  const std::vector<unsigned char> huge(48 * 1024 + 1, 0xCD);  // chunk: 12 floats = 48 bytes
  ASSERT_GE(H5Dwrite_chunk(d.id(), H5P_DEFAULT, 0, second, huge.size(), huge.data()), 0);
  try {
    (void)h5::read_float_chunks(d.id(), {0, 0}, dims, got.data(), d.context(), 2);
    FAIL() << "an oversized chunk was read without an error";
  } catch (const ctforge::error& e) {
    EXPECT_NE(std::string(e.what()).find("claims 49153 stored bytes"), std::string::npos)
        << e.what();
  }
  // The first chunk alone is still readable.
  std::vector<float> first(12);
  ASSERT_TRUE(h5::read_float_chunks(d.id(), {0, 0}, {2, 6}, first.data(), d.context()));
  EXPECT_EQ(first, std::vector<float>(v.begin(), v.begin() + 12));
}

}  // namespace
