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

/// GPU calls whose plan describe_last_gpu_call reports.
enum class gpu_call {
  reconstruction,     ///< FDK / FBP (reconstruct) and back_project on the CUDA backend
  forward_projection  ///< forward_project on the CUDA backend
};

/// One line on how the calling thread's last GPU call of `kind` ran, for logs: how the views
/// were batched, whether the volume was split into z-slabs (and where the filtered projections
/// were kept), device time per stage. Empty before the first such call on this thread and in
/// builds without the CUDA backend.
std::string describe_last_gpu_call(gpu_call kind);

}  // namespace ctforge
