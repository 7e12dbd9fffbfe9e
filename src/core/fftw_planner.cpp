#include "core/fftw_planner.hpp"

namespace ctforge::detail {

std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace ctforge::detail
