// A corrupt HDF5 file whose chunks reach beyond a fixed dimension (chunks of 6 x 7 x 6 for a
// 6 x 6 x 6 volume; fuzz_hdf5_readers found it) made libhdf5 1.10 copy past its buffers when
// the data were read (ctforge info, read_volume). It is refused naming the dataset, before
// any read; the valid file it was mutated from still reads.
#include <gtest/gtest.h>

#include <string>

#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

const std::string corpus = std::string(CTFORGE_SOURCE_DIR) + "/fuzz/corpus/fuzz_hdf5_readers/";

TEST(Hdf5ChunkLayout, ChunksBeyondAFixedDimensionAreRefusedAsCorrupt) {
  const std::string bad = corpus + "regress-chunk-beyond-fixed-dims.h5";
  testing::expect_error_naming([&] { io::describe_any(bad); }, "dataset /volume",
                               "chunks of 7 along dimension 1 exceed its fixed size 6");
  testing::expect_error_naming([&] { io::read_volume_any(bad); }, "dataset /volume",
                               "corrupt file");
  // The file it was mutated from (the same layout with chunks of 6 x 6 x 6) reads.
  const volume v = io::read_volume_any(corpus + "vol.h5");
  EXPECT_EQ(v.geom.nx * v.geom.ny * v.geom.nz, 216);
}

}  // namespace
}  // namespace ctforge
