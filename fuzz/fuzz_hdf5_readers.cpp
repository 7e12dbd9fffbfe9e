// HDF5 files: the projection readers (native, DataExchange, NXtomo, through
// read_projections_any), the native volume reader and the description (info).
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".h5");
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_projections_any(path); });
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_volume(path); });
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::describe_any(path); });
  return 0;
}
