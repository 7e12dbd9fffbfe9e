// Where a computation runs: the CPU or a CUDA device. Shared by reconstruction and projectors.
#pragma once

#include <string>
#include <string_view>

namespace ctforge {

enum class backend { automatic, cpu, cuda };

backend parse_backend(std::string_view name);  ///< "auto", "cpu", "cuda" (throws usage_error)

/// Which backend `where` resolves to on this machine ("cpu" or "cuda") for CUDA device ordinal
/// `device`, with a one-line reason when automatic selection falls back to the CPU (empty
/// otherwise). backend::cuda without a usable device throws (the reason in the message);
/// without the CUDA backend compiled in it is a usage_error. A negative `device`, or one that
/// is not among the devices present (cuda or automatic), is a usage_error naming --device.
backend resolve_backend(backend where, std::string* notice = nullptr, int device = 0);

}  // namespace ctforge
