// Zarr volumes and projections in local directories (src/io/zarr*.cpp): round trips over odd and
// size-1 shapes, selections read chunk by chunk against slices of the whole, the codecs' own
// checks (crc32c's published check value, corrupt and truncated shards), refusals that name the
// file, and outputs that never destroy an earlier one. Arrays written by zarr-python (the
// independent implementation) are read in python/tests/test_zarr_cli.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/zarr_store.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
using testing::expect_runtime_error_naming;
using testing::expect_usage_error_naming;

fs::path scratch(const std::string& name) { return testing::scratch_dir("zarr", name); }

/// testing::ramp_volume, sizes in the arrays' order (z, y, x).
volume ramp(std::int64_t nz, std::int64_t ny, std::int64_t nx) {
  return testing::ramp_volume(nx, ny, nz);
}

void overwrite_byte(const fs::path& f, std::streamoff at_from_end) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(-at_from_end, std::ios::end);
  const char c = static_cast<char>(io.get() ^ 0x5A);
  io.seekp(-at_from_end, std::ios::end);
  io.put(c);
}

TEST(Zarr, Crc32cMatchesThePublishedCheckValue) {
  const std::string s = "123456789";  // RFC 3720 / the CRC catalogue: CRC-32C check 0xE3069283
  EXPECT_EQ(io::zarr::crc32c(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()),
            0xE3069283u);
}

// (nz, ny, nx, compress): odd sizes, size-1 axes, more planes than fit one shard's default.
class ZarrVolumeRoundTrip
    : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(ZarrVolumeRoundTrip, ValuesSpacingOriginIdentical) {
  const auto [nz, ny, nx, compress] = GetParam();
  const fs::path dir = scratch("round_trip");
  const volume v = ramp(nz, ny, nx);
  const std::string out = (dir / "v.zarr").string();
  io::write_zarr_volume(out, v, compress);
  EXPECT_EQ(io::volume_format_of(out), io::volume_format::zarr);
  EXPECT_EQ(io::content_kind(out), "volume");
  const volume w = io::read_volume_any(out);
  EXPECT_EQ(w.data, v.data);
  EXPECT_EQ(w.geom.spacing_mm, v.geom.spacing_mm);
  EXPECT_EQ(w.geom.origin_mm, v.geom.origin_mm);
  EXPECT_EQ(w.geom.nx, v.geom.nx);
  EXPECT_EQ(w.geom.nz, v.geom.nz);
  EXPECT_TRUE(testing::leftover_temporaries(dir).empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ZarrVolumeRoundTrip,
                         ::testing::Values(std::make_tuple(1, 1, 1, true),
                                           std::make_tuple(5, 3, 4, true),
                                           std::make_tuple(33, 1, 7, false),
                                           std::make_tuple(2, 17, 1, true),
                                           std::make_tuple(7, 13, 11, false)));

TEST(Zarr, ShardsHoldWholePlanesAndTheLastIsShorter) {
  const fs::path dir = scratch("shards");
  // 1100 x 1000 floats = 4.4 MB a plane: 15 planes per 64 MiB shard, 40 planes = 3 shards.
  volume v = ramp(40, 1000, 1100);
  io::write_zarr_volume((dir / "v.zarr").string(), v);
  const io::zarr::array a = io::zarr::open_array((dir / "v.zarr").string());
  EXPECT_EQ(a.chunk[0], 15);
  EXPECT_TRUE(fs::exists(dir / "v.zarr/c/2/0/0"));
  EXPECT_FALSE(fs::exists(dir / "v.zarr/c/3/0/0"));
  // A box across the shards' boundaries, from a corner, equals the slice of the whole.
  const std::array<std::int64_t, 3> first{13, 997, 3}, count{5, 3, 1096};
  const std::vector<float> box = io::zarr::read_box(a, first, count);
  for (std::int64_t k = 0; k < 5; ++k)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t i = 0; i < 1096; ++i)
        ASSERT_EQ(box[static_cast<std::size_t>((k * 3 + j) * 1096 + i)], v.at(13 + k, 997 + j, 3 + i));
}

TEST(Zarr, ProjectionsKeepTheirGeometryAndSelectionsReadTheSameValues) {
  const fs::path dir = scratch("projections");
  std::vector<double> angles;
  for (int k = 0; k < 9; ++k) angles.push_back(0.3 * k);
  const geometry g = make_cone_geometry(7, 5, 0.5, 0.6, 100, 200, angles);
  const projection_stack p =
      testing::scan_from(9, 5, 7, [](std::int64_t v, std::int64_t r, std::int64_t c) {
        return static_cast<float>(v * 100 + r * 10 + c) * 0.01f;
      });
  const std::string out = (dir / "p.zarr").string();
  io::write_zarr_projections(out, p, g);
  EXPECT_EQ(io::content_kind(out), "projections");
  const io::loaded_projections all = io::read_projections_any(out);
  EXPECT_EQ(all.format, "zarr");
  EXPECT_EQ(all.projections.data, p.data);
  // The geometry as the native HDF5 projection file keeps it (angles pass through degrees).
  io::write_projections((dir / "p.h5").string(), p, g);
  EXPECT_EQ(geometry_to_json(*all.geom),
            geometry_to_json(*io::read_projections_any((dir / "p.h5").string()).geom));
  for (std::size_t k = 0; k < angles.size(); ++k)
    EXPECT_NEAR(all.geom->orbit->angles_rad[k], angles[k], 1e-14);
  io::projection_read_options o;
  o.select = {{2, 4}, {1, 3}, {5, -1}};
  const io::loaded_projections part = io::read_projections_any(out, o);
  ASSERT_EQ(part.projections.views, 4);
  ASSERT_EQ(part.projections.cols, 2);
  for (std::int64_t v = 0; v < 4; ++v)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 2; ++c)
        EXPECT_EQ(part.projections.view(v)[r * 2 + c], p.view(v + 2)[(r + 1) * 7 + c + 5]);
}

TEST(Zarr, CorruptIndexTruncatedShardAndLostShardAreErrorsNamingTheFile) {
  const fs::path dir = scratch("corrupt");
  const volume v = ramp(4, 6, 5);
  const fs::path a = dir / "a.zarr", b = dir / "b.zarr", c = dir / "c.zarr";
  for (const auto& p : {a, b, c}) io::write_zarr_volume(p.string(), v);
  overwrite_byte(a / "c/0/0/0", 10);  // inside the index: the crc32c no longer matches
  expect_runtime_error_naming([&] { io::read_volume_any(a.string()); }, "a.zarr/c/0/0/0",
                              "crc32c");
  fs::resize_file(b / "c/0/0/0", 20);  // shorter than its index
  expect_runtime_error_naming([&] { io::read_volume_any(b.string()); }, "b.zarr/c/0/0/0");
  fs::remove(c / "c/0/0/0");  // a finished ctforge volume stores every shard
  expect_runtime_error_naming([&] { io::read_volume_any(c.string()); }, "c.zarr", "missing");
}

TEST(Zarr, CorruptCompressedChunkIsAnErrorNotGarbage) {
  const fs::path dir = scratch("corrupt_chunk");
  const volume v = ramp(3, 16, 16);
  const fs::path a = dir / "a.zarr";
  io::write_zarr_volume(a.string(), v);
  // Byte 20 of the shard lies in the first chunk's Blosc data (its header is 16 bytes).
  std::fstream f(a / "c/0/0/0", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(2);  // the Blosc header's flags / type size
  f.put('\x7f');
  f.close();
  expect_runtime_error_naming([&] { io::read_volume_any(a.string()); }, "a.zarr/c/0/0/0");
}

TEST(Zarr, UnfinishedGroupsUnknownCodecsAndForeignDirectoriesAreRefused) {
  const fs::path dir = scratch("refusals");
  const volume v = ramp(2, 3, 4);
  const fs::path a = dir / "a.zarr";
  io::write_zarr_volume(a.string(), v);
  // An unfinished run's array.
  {
    std::ifstream in(a / "zarr.json");
    std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const auto at = t.find("\"ctforge_complete\": true");
    ASSERT_NE(at, std::string::npos);
    t.replace(at, 24, "\"ctforge_complete\": false");
    std::ofstream(a / "zarr.json") << t;
  }
  expect_runtime_error_naming([&] { io::read_volume_any(a.string()); }, "a.zarr", "incomplete");
  // A group.
  fs::create_directories(dir / "g.zarr");
  std::ofstream(dir / "g.zarr/zarr.json") << R"({"zarr_format": 3, "node_type": "group"})";
  expect_runtime_error_naming([&] { io::read_volume_any((dir / "g.zarr").string()); }, "g.zarr",
                              "holds none");
  // A group's arrays are named in the refusal (groups inside it followed).
  fs::create_directories(dir / "scan.zarr/raw");
  std::ofstream(dir / "scan.zarr/zarr.json") << R"({"zarr_format": 3, "node_type": "group"})";
  std::ofstream(dir / "scan.zarr/raw/.zgroup") << R"({"zarr_format": 2})";
  io::write_volume_any((dir / "scan.zarr/recon").string(), v);
  io::write_zarr_volume((dir / "scan.zarr/raw/dark").string(), v);
  expect_runtime_error_naming([&] { io::read_volume_any((dir / "scan.zarr").string()); },
                              "scan.zarr/raw/dark ([2, 3, 4], float32); ");
  expect_runtime_error_naming([&] { (void)io::describe_any((dir / "scan.zarr").string()); },
                              "scan.zarr/recon ([2, 3, 4], float32)");
  EXPECT_EQ(io::read_volume_any((dir / "scan.zarr/recon").string()).data, v.data);
  // A codec this reader does not have, named with its field.
  fs::create_directories(dir / "u.zarr");
  std::ofstream(dir / "u.zarr/zarr.json") << R"({"zarr_format": 3, "node_type": "array",
    "shape": [2, 2, 2], "data_type": "float32", "fill_value": 0,
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 2, 2]}},
    "chunk_key_encoding": {"name": "default"},
    "codecs": [{"name": "bytes"}, {"name": "lzma"}]})";
  expect_runtime_error_naming([&] { io::read_volume_any((dir / "u.zarr").string()); },
                              "u.zarr/zarr.json", "lzma");
  // A group is not replaced by an array (its arrays would be lost); a geometry attribute of
  // the wrong JSON type is summarised without it.
  std::ofstream(dir / "g.zarr/keep.txt") << "mine";
  expect_usage_error_naming([&] { io::write_volume_any((dir / "g.zarr").string(), v); }, "g.zarr",
                            "group");
  EXPECT_TRUE(fs::exists(dir / "g.zarr/keep.txt"));
  fs::create_directories(dir / "odd.zarr");
  std::ofstream(dir / "odd.zarr/zarr.json") << R"({"zarr_format": 3, "node_type": "array",
    "shape": [1, 1, 2], "data_type": "float32", "fill_value": "0x7fc00000",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1, 2]}},
    "codecs": [{"name": "bytes"}], "attributes": {"ctforge_geometry": [1, 2]}})";
  EXPECT_NE(io::describe_any((dir / "odd.zarr").string()).find("Zarr v3 array"), std::string::npos);
  expect_runtime_error_naming([&] { io::read_volume_any((dir / "odd.zarr").string()); },
                              "odd.zarr", "projections");  // NaN fill: never reaches a volume
  // A hexadecimal fill value has two digits per byte, no more, no less.
  fs::create_directories(dir / "hex.zarr");
  std::ofstream(dir / "hex.zarr/zarr.json") << R"({"zarr_format": 3, "node_type": "array",
    "shape": [1, 1, 2], "data_type": "float32", "fill_value": "0x1ffffffff",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1, 2]}},
    "codecs": [{"name": "bytes"}]})";
  expect_runtime_error_naming([&] { io::read_volume_any((dir / "hex.zarr").string()); },
                              "hex.zarr/zarr.json", "fill_value");
  // A directory that is not Zarr is never replaced; object storage is the Python package's.
  fs::create_directories(dir / "keep.zarr");
  std::ofstream(dir / "keep.zarr/notes.txt") << "mine";
  expect_usage_error_naming([&] { io::write_volume_any((dir / "keep.zarr").string(), v); },
                            "keep.zarr", "not replaced");
  EXPECT_TRUE(fs::exists(dir / "keep.zarr/notes.txt"));
  expect_usage_error_naming([&] { io::read_volume_any("s3://bucket/v.zarr"); }, "s3://bucket",
                            "Python");
}

TEST(Zarr, AFailedWriteLeavesTheEarlierArrayAndNoTemporary) {
  const fs::path dir = scratch("earlier");
  const volume v = ramp(3, 4, 5);
  const std::string out = (dir / "v.zarr").string();
  io::write_volume_any(out, v);
  volume bad = ramp(3, 4, 5);
  bad.data[17] = std::nanf("");
  expect_runtime_error_naming([&] { io::write_volume_any(out, bad); }, "v.zarr", "non-finite");
  EXPECT_EQ(io::read_volume_any(out).data, v.data);
  volume other = ramp(2, 2, 2);
  io::write_volume_any(out, other);  // replaced as a unit
  EXPECT_EQ(io::read_volume_any(out).data, other.data);
  EXPECT_TRUE(testing::leftover_temporaries(dir).empty());
}

TEST(Zarr, PlaneWriterTakesPlanesInAnyOrderAndPublishesOnlyWhenComplete) {
  const fs::path dir = scratch("plane_writer");
  const volume v = ramp(11, 5, 6);
  const std::size_t plane = 30;
  const auto planes = [&](std::int64_t k0, std::int64_t n) {
    return std::span<const float>(v.data.data() + k0 * plane, static_cast<std::size_t>(n) * plane);
  };
  const std::string out = (dir / "v.zarr").string();
  {
    // Shards of 4 planes: [0, 4) [4, 8) [8, 11); calls across, inside and out of order.
    const auto w = io::open_plane_writer(out, v.geom, 4);
    w->write_planes(8, planes(8, 3));  // the last, shorter shard whole
    w->write_planes(5, planes(5, 2));  // inside shard 1
    w->write_planes(0, planes(0, 5));  // shard 0 whole and the first plane of shard 1
    EXPECT_FALSE(fs::exists(out)) << "published before commit";
    w->write_planes(7, planes(7, 1));
    w->commit();
  }
  {
    // Planes sent twice (a repeated unit) count once: shard 0 waits for all of its planes.
    const auto w = io::open_plane_writer(out, v.geom, 4);
    w->write_planes(0, planes(0, 2));
    w->write_planes(0, planes(0, 2));
    w->write_planes(4, planes(4, 7));
    expect_runtime_error_naming([&] { w->commit(); }, "v.zarr", "planes from 0");
    w->write_planes(2, planes(2, 2));
    w->write_planes(4, planes(4, 4));  // a complete shard again: written again, the same
    w->commit();
  }
  EXPECT_EQ(io::read_volume_any(out).data, v.data);
  EXPECT_EQ(io::zarr::open_array(out).chunk[0], 4);
  {
    const volume other = ramp(11, 5, 6);
    const auto w = io::open_plane_writer(out, other.geom, 4);
    w->write_planes(0, planes(0, 8));
    expect_runtime_error_naming([&] { w->commit(); }, "v.zarr", "never written");
  }  // destroyed without a commit: the earlier array stays, no temporary is left
  EXPECT_EQ(io::read_volume_any(out).data, v.data);
  EXPECT_TRUE(testing::leftover_temporaries(dir).empty());
  expect_usage_error_naming([&] { (void)io::open_plane_writer((dir / "v.nrrd").string(), v.geom, 4); },
                            "v.nrrd", ".zarr");
}

TEST(ZarrCli, ConvertReconAndInfoTakeZarr) {
  const fs::path dir = scratch("cli");
  const auto run = [&](const std::string& args) { return testing::run_cli(dir, args); };
  const std::string grid = " --size-xyz 21,20,7 --spacing 1.5 --backend cpu --quiet";
  std::ofstream(dir / "g.json") << testing::cone_json(32, 9, 2.0, 12, 30);
  ASSERT_EQ(run("simulate --phantom shepp-logan --phantom-size 30 --geometry g.json -o p.h5 "
                "--quiet")
                .status,
            0);
  auto r = run("convert p.h5 p.zarr");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon p.zarr -o a.zarr" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon p.h5 -o a.h5" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(io::read_volume_any((dir / "a.zarr").string()).data,
            io::read_volume((dir / "a.h5").string()).data);
  // Slab by slab into the Zarr output: one shard per unit, written as the unit comes; the
  // same voxels as the same units streamed into an HDF5 file (units filter their own row
  // bands, so they differ from the one-shot volume in the last bits).
  r = run("recon p.h5 -o s.h5 --checkpoint-dir ck1 --unit-planes 3" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  const volume slabs = io::read_volume((dir / "s.h5").string());
  r = run("recon p.h5 -o s.zarr --checkpoint-dir ck2 --unit-planes 3" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(io::read_volume_any((dir / "s.zarr").string()).data, slabs.data);
  EXPECT_EQ(io::zarr::open_array((dir / "s.zarr").string()).chunk[0], 3);
  EXPECT_TRUE(fs::exists(dir / "s.zarr/c/2/0/0"));  // planes 6..6 of 7
  for (const std::string out : {"m.h5", "m.zarr"}) {
    r = run("recon p.h5 -o " + out + " --memory-limit 64M --unit-planes 3" + grid);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  EXPECT_EQ(io::read_volume_any((dir / "m.zarr").string()).data,
            io::read_volume((dir / "m.h5").string()).data);
  r = run("convert a.zarr b.nrrd");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(io::read_volume_any((dir / "b.nrrd").string()).data,
            io::read_volume((dir / "a.h5").string()).data);
  r = run("info p.zarr");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("Zarr v3 array, ctforge projections"), std::string::npos) << r.output;
  // An s3:// output is staged and stored after the run (python/tests/test_cli_object_store.py
  // against a test server); a store that cannot be reached (port 9 on loopback) fails naming
  // the URL.
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9", 1);
  r = run("recon p.zarr -o s3://bucket/v.zarr" + grid);
  ::unsetenv("AWS_ENDPOINT_URL");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("s3://bucket/v.zarr/"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctforge
