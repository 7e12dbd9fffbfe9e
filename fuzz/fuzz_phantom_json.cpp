// Phantom JSON (phantom_from_json).
#include "ctforge/phantom.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::phantom_from_json(text, "fuzz.json"); });
  return 0;
}
