// Small double-precision 3-vector used by the host-side geometry code.
#pragma once

#include <cmath>

namespace ctforge {

struct vec3 {
  double x = 0, y = 0, z = 0;
};

constexpr vec3 operator+(vec3 a, vec3 b) {
  return {a.x + b.x, a.y + b.y, a.z + b.z};
}
constexpr vec3 operator-(vec3 a, vec3 b) {
  return {a.x - b.x, a.y - b.y, a.z - b.z};
}
constexpr vec3 operator-(vec3 a) {
  return {-a.x, -a.y, -a.z};
}
constexpr vec3 operator*(double s, vec3 a) {
  return {s * a.x, s * a.y, s * a.z};
}
constexpr vec3 operator*(vec3 a, double s) {
  return s * a;
}
constexpr double dot(vec3 a, vec3 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z;
}
constexpr vec3 cross(vec3 a, vec3 b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
inline double norm(vec3 a) {
  return std::sqrt(dot(a, a));
}
constexpr bool operator==(vec3 a, vec3 b) {
  return a.x == b.x && a.y == b.y && a.z == b.z;
}

}  // namespace ctforge
