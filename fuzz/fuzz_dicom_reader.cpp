// One DICOM file (io::read_volume_any -> our series checks over GDCM).
#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".dcm");
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_volume_any(path); });
  return 0;
}
