// TIFF projections (io::read_tiff_stack on one, possibly multi-page, file).
#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".tif");
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_tiff_stack(path); });
  return 0;
}
