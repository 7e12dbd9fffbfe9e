// Geometry JSON (geometry_from_json): whatever parses must write back (geometry_to_json) and
// parse again to the same number of views.
#include "ctforge/geometry.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ctforge::fuzz::refused_or_fine([&] {
    const ctforge::geometry g = ctforge::geometry_from_json(text, "fuzz.json");
    const ctforge::geometry h = ctforge::geometry_from_json(ctforge::geometry_to_json(g));
    if (h.view_count() != g.view_count() || h.cols != g.cols || h.rows != g.rows) __builtin_trap();
  });
  return 0;
}
