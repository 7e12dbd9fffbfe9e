#include "cuda/api.hpp"
#include "recon/setup.hpp"
