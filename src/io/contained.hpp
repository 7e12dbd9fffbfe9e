// Containment of third-party parsers (libhdf5, GDCM) that can crash or assert on corrupt files:
// the file is first parsed in a forked child process, and a child that dies makes the file an
// error naming it instead of killing the caller (a long run, a notebook kernel, a server).
#pragma once

#include <functional>
#include <string>

namespace ctforge::detail {

/// Runs `probe` (a parse of `path`) in a forked child process. When the child dies (a signal,
/// an abort from an assertion, a sanitizer report), throws ctforge::error "<path>: corrupt
/// file: <library> crashed while parsing it (<how>); refused". An exception thrown by the
/// probe is no crash: the caller's own parse reports it. A child still running after
/// `timeout_s` seconds (<= 0: the environment's CTFORGE_PARSE_TIMEOUT, default 10) is killed
/// and the file refused the same way (libhdf5 loops for ever on some corrupt files, and the
/// parse here would never return). Each file is probed once per process
/// (files up to 1 MiB are recognised by their content, larger ones by device, inode, size and
/// modification time). Inside a child, probes run inline (no nested children).
void probe_in_child(const std::string& path, const char* library,
                    const std::function<void()>& probe, double timeout_s = 0);

/// The HDF5 probe: opens `path` read-only and walks every object (datasets: type, space,
/// creation properties, the first elements; attributes: type, space, small numeric values).
/// Called by h5::file::open through probe_in_child before the file is opened in this process.
void probe_hdf5_file(const std::string& path);

/// True in a probe's child process.
bool in_probe_child() noexcept;

}  // namespace ctforge::detail
