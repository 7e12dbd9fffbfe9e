#include "ctforge/api.hpp"
#include "core/geometry.hpp"
