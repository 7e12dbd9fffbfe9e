#pragma once
#include "io/h5.hpp"
