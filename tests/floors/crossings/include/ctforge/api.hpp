#pragma once
#include <vector>
#include <cuda_runtime.h>
#include <hdf5.h>
#include <itkImage.h>
#include "core/geometry.hpp"
