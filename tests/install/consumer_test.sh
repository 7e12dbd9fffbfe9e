#!/usr/bin/env bash
# Installs the build tree into a temporary prefix (cmake --install), then configures, builds
# and runs tests/install/consumer against it with find_package(ctforge). Also checks that the
# exported target hands consumers no private dependency (HDF5, ITK, FFTW, TIFF, CUDA, ...).
# Usage: consumer_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
interface=$(grep -h 'INTERFACE_LINK_LIBRARIES' "$work"/prefix/lib*/cmake/ctforge/ctforgeTargets*.cmake)
if grep -Eiq 'hdf5|itk|fftw|tiff|expat|png|cufft|cudart|gdcm|fmt|nlohmann' <<< "$interface"; then
  echo "private dependencies leak into the exported target: $interface" >&2
  exit 1
fi
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/consumer"
# The installed command line runs from the prefix (its rpath finds libctforge there).
"$work/prefix/bin/ctforge" --version
