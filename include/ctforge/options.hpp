// The options of reconstruct() that belong to some algorithms only: one table of their names
// (command line and Python), help text and the algorithms they apply to. The command line, the
// Python package and its distributed layer all ask it, so an option refused for a method in one
// is refused in all, with the same words.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "ctforge/recon.hpp"

namespace ctforge {

/// Which algorithms an option applies to.
enum class option_scope {
  analytic,         ///< fdk, fbp, helical-fbp
  circular,         ///< fdk, fbp (circular orbits)
  helical,          ///< helical-fbp
  iterative,        ///< sirt, os-sart, cgls, fista-tv, osem
  relaxed,          ///< sirt, os-sart (a step length)
  ordered_subsets,  ///< os-sart, osem
  fista_tv,         ///< fista-tv
};

/// One algorithm-specific option.
struct recon_option {
  std::string_view name;  ///< Python keyword and run-record key, e.g. "tv_weight"
  std::string_view flag;  ///< command line, e.g. "--tv-weight"
  option_scope scope;
  /// Another option it needs ("checkpoint_dir"), empty if none. The command line also accepts
  /// --memory-limit in place of --checkpoint-dir for --unit-planes.
  std::string_view needs;
  std::string_view help;  ///< one paragraph, as `ctforge recon --help` prints it
};

/// Every algorithm-specific option of reconstruct(), in the order `ctforge recon --help` lists
/// them.
std::span<const recon_option> recon_option_table();

/// The entry whose name or flag is `name_or_flag`; nullptr when there is none.
const recon_option* find_recon_option(std::string_view name_or_flag);

/// Whether `scope` includes algorithm `a`.
bool applies(option_scope scope, algorithm a);

/// Whether the option named `name_or_flag` (name or flag) applies to `a`; usage_error for a
/// name the table does not hold.
bool option_applies(std::string_view name_or_flag, algorithm a);

/// The algorithms of `scope`, as they are spelled on the command line: "fdk, fbp, helical-fbp".
std::string algorithms_of(option_scope scope);

/// usage_error "<spelling>: does not apply to --algorithm <a> (only to <algorithms>)" when the
/// option does not apply to `a`; `spelling` is how the caller named it (flag or keyword).
void require_option_applies(std::string_view name_or_flag, algorithm a, std::string_view spelling);

}  // namespace ctforge
