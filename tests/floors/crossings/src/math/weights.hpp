#pragma once
#include "core/geometry.hpp"
