// Included before any ITK header. Debian's ITK 5.2 compiler-detection header knows GCC alone
// and stops with "Unsupported compiler" under clang (the asan preset builds with clang for
// libFuzzer). clang speaks the GNU dialect ITK needs: the header is read once here as for GCC
// (its include guard makes later inclusions no-ops). Nothing changes under GCC.
#pragma once

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wbuiltin-macro-redefined"
#pragma push_macro("__clang__")
#pragma push_macro("__GNUC__")
#pragma push_macro("__GNUC_MINOR__")
#undef __clang__
#undef __GNUC__
#undef __GNUC_MINOR__
#define __GNUC__ 12  // the C++ features clang 14 has (C++20): those of GCC 12 for ITK's purposes
#define __GNUC_MINOR__ 2
#include <itk_compiler_detection.h>
#pragma pop_macro("__GNUC_MINOR__")
#pragma pop_macro("__GNUC__")
#pragma pop_macro("__clang__")
#pragma clang diagnostic pop
#endif
