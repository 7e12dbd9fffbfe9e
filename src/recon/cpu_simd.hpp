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

// The attributes of the intrinsics loops: a function compiled for AVX2 + FMA (or AVX-512F + VL
// + FMA) whatever the library's -march, and the helpers inlined into it. Defined on x86 with
// GCC or Clang only (CTFORGE_SIMD_X86); elsewhere cpu_simd_supported() is none.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define CTFORGE_SIMD_X86 1
#define CTFORGE_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define CTFORGE_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline
#define CTFORGE_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,fma")))
#define CTFORGE_AVX512_INLINE __attribute__((target("avx512f,avx512vl,fma"), always_inline)) inline
#endif

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
