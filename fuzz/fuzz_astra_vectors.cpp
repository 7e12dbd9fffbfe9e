// ASTRA cone_vec / parallel3d_vec rows (io::read_astra_vectors), both beams.
#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ctforge::fuzz::scratch_file(data, size, ".vec");
  for (auto beam : {ctforge::beam_kind::cone, ctforge::beam_kind::parallel})
    ctforge::fuzz::refused_or_fine(
        [&] { (void)ctforge::io::read_astra_vectors(path, beam, 8, 4); });
  return 0;
}
