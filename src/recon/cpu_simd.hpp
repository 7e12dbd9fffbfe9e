// The SIMD instruction sets the fast CPU loops are written for, chosen at run time: the loops
// with intrinsics are compiled for their instruction set through target attributes, whatever
// the library's -march, and called only where cpu_simd_level() allows (one library that runs
// fast where the CPU allows and correctly everywhere). Used by the back-projection
// (recon/backproject_simd.cpp) and the forward projector (recon/projector.cpp).
//
// CTFORGE_SIMD=scalar|avx2|avx512 in the environment caps the level (read once, at the first
// call), as set_cpu_simd_level does in tests and benchmarks; neither can raise it above what
// the CPU has.
#pragma once

#include <optional>

namespace ctforge::detail {

enum class simd_level {
  none,   ///< the portable loops (what the compiler vectorises for the library's -march)
  avx2,   ///< AVX2 + FMA, 8 float lanes
  avx512  ///< AVX-512F + VL (and FMA), 16 float lanes
};

/// The widest level this CPU (and its operating system) supports; none off x86.
simd_level cpu_simd_supported();

/// The level the loops use: cpu_simd_supported(), capped by CTFORGE_SIMD and by
/// set_cpu_simd_level. Throws usage_error naming the variable when CTFORGE_SIMD holds
/// something else than scalar, avx2 or avx512.
simd_level cpu_simd_level();

/// Tests and benchmarks: caps the level at `cap` (std::nullopt: back to the default). Not meant
/// to be changed while a back-projection or projection runs.
void set_cpu_simd_level(std::optional<simd_level> cap);

/// "scalar", "avx2", "avx512".
const char* to_string(simd_level level);

}  // namespace ctforge::detail
