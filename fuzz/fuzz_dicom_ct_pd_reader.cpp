// One DICOM-CT-PD file (io::read_dicom_ct_pd: our element walk, the format's tags, the pixels).
#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".dcm");
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_dicom_ct_pd(path); });
  return 0;
}
