// RTK ThreeDCircularProjectionGeometry XML (io::read_rtk_geometry, expat).
#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".xml");
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_rtk_geometry(path, 8, 4, 1, 1); });
  return 0;
}
