#pragma once
#include "math/weights.hpp"
