#include "io/h5.hpp"
#include "cuda/api.hpp"
