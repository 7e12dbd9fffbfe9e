// s3:// URLs in the command line's file options (cli.hpp: object_input / object_output).
//
// The commands themselves read and write local paths. A URL given to an option is replaced, as
// the command line is parsed, by a path in one staging directory of this process
// ($TMPDIR/ctforge-objects-XXXXXX): inputs are downloaded there before the command runs (HDF5
// inputs are not: they are read in place by ranged requests), outputs are written there by the
// command as usual (under a temporary name, checked and renamed) and stored at their URL once
// the command has succeeded. The staging directory is removed when the process ends, and by the
// SIGINT / SIGTERM handlers that remove partial outputs.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "cli.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/io.hpp"
#include "io/object_store.hpp"
#include "io/s3_client.hpp"

namespace ctforge::cli {
namespace {

namespace fs = std::filesystem;

struct staged {
  std::string option, url, local;  ///< local == url: an HDF5 input read in place
  bool stored = false;             ///< an output already stored at its URL
};

/// The process's staging directory and what was staged in it.
struct staging {
  std::string dir;
  int slot = -1;
  std::vector<staged> inputs, outputs;

  const std::string& directory() {
    if (dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = fmt::format("{}/ctforge-objects-XXXXXX", tmp && *tmp ? tmp : "/tmp");
      CTFORGE_CHECK(::mkdtemp(pattern.data()) != nullptr,
                    fmt::format("cannot create a staging directory {} for s3:// files "
                                "(set TMPDIR to a writable directory)",
                                pattern));
      dir = pattern;
      slot = io::register_partial_output(dir, true);
    }
    return dir;
  }
  /// A new directory of the staging directory, for one option's file.
  std::string place(const char* kind) {
    const fs::path p =
        fs::path(directory()) / fmt::format("{}-{}", kind, inputs.size() + outputs.size());
    fs::create_directories(p);
    return p.string();
  }
  ~staging() {
    if (dir.empty()) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
    io::unregister_partial_output(slot);
  }
};

staging& stage() {
  static staging s;
  return s;
}

/// The URL without its last name ("s3://b/run/" for s3://b/run/vol.zarr/): where the files
/// staged beside it go, and what its staging directory stands for in messages.
std::string url_parent(const std::string& url) {
  std::string p = url;
  while (p.ends_with('/')) p.pop_back();
  p.resize(p.size() - io::object_name(url).size());
  return p;
}

/// Files the HDF5 readers open by name (ranged reads of the object: no download).
bool read_in_place(const std::string& url) {
  std::string ext = fs::path(io::object_name(url)).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".h5" || ext == ".hdf5" || ext == ".hdf" || ext == ".nx" || ext == ".nxs";
}

/// The URL, checked (CLI11 reports a ValidationError as that option's error: exit 2).
std::string checked_url(const std::string& option, const std::string& url) {
  try {
    io::resolve_s3_object(url);
  } catch (const error& e) {
    throw CLI::ValidationError(option, e.what());
  }
  return url;
}

/// A bad CTFORGE_S3_PART_SIZE refused before the command runs, as that option's error.
void check_part_size(const std::string& option) {
  try {
    io::s3::part_size();
  } catch (const error& e) {
    throw CLI::ValidationError(option, e.what());
  }
}

}  // namespace

CLI::Validator object_input(const std::string& option) {
  return CLI::Validator(
      [option](std::string& value) {
        if (!io::is_object_url(value)) return std::string();
        staging& s = stage();
        if (read_in_place(checked_url(option, value))) {
          s.inputs.push_back({option, value, value});
          return std::string();
        }
        const std::string dir = s.place("in");
        s.inputs.push_back({option, value, (fs::path(dir) / io::object_name(value)).string()});
        value = s.inputs.back().local;
        return std::string();
      },
      "", "s3:// input");
}

CLI::Validator object_output(const std::string& option) {
  return CLI::Validator(
      [option](std::string& value) {
        if (!io::is_object_url(value)) return std::string();
        checked_url(option, value);
        check_part_size(option);
        staging& s = stage();
        const std::string dir = s.place("out");
        s.outputs.push_back({option, value, (fs::path(dir) / io::object_name(value)).string()});
        value = s.outputs.back().local + (value.ends_with('/') ? "/" : "");
        return std::string();
      },
      "", "s3:// output");
}

CLI::Validator local_only(const std::string& option, const std::string& instead) {
  return CLI::Validator(
      [option, instead](std::string& value) {
        if (io::is_object_url(value))
          throw CLI::ValidationError(
              option, fmt::format("{}: takes a local path, not an object URL; {}", value, instead));
        return std::string();
      },
      "", "local path");
}

void fetch_object_inputs() {
  staging& s = stage();
  for (std::size_t a = 0; a < s.outputs.size(); ++a)
    for (std::size_t b = a + 1; b < s.outputs.size(); ++b)
      CTFORGE_EXPECTS(s.outputs[a].url != s.outputs[b].url,
                      fmt::format("{} and {}: both name {}", s.outputs[a].option,
                                  s.outputs[b].option, s.outputs[a].url));
  for (const staged& o : s.outputs)
    for (const staged& i : s.inputs)
      CTFORGE_EXPECTS(o.url != i.url, fmt::format("{} and {}: both name {}; the output would "
                                                  "replace the input",
                                                  i.option, o.option, o.url));
  for (const staged& i : s.inputs)
    if (i.local != i.url) io::download(i.url, fs::path(i.local).parent_path().string());
}

void store_object_outputs() {
  for (staged& o : stage().outputs) {
    std::error_code ec;
    if (o.stored || !fs::exists(o.local, ec)) continue;  // (not written: a --unit-share run's)
    // A header's data file (.mhd + .zraw, .nhdr + .raw) was written beside it, in the output's
    // own staging directory: stored beside it first, so the header never names a missing file.
    const fs::path dir = fs::path(o.local).parent_path();
    const std::string prefix = url_parent(o.url);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path() != fs::path(o.local) && e.is_regular_file())
        io::upload(e.path().string(), prefix + e.path().filename().string());
    io::upload(o.local, o.url);
    o.stored = true;
  }
}

std::optional<object_id> object_identity(const std::string& path) {
  for (const auto* list : {&stage().inputs, &stage().outputs})
    for (const staged& o : *list)
      if (path == o.local || path == o.url) {
        const io::s3::object_info i = io::s3::client().info(o.url);  // as the store has it
        return object_id{o.url, i.size, i.etag};
      }
  return std::nullopt;
}

std::string with_object_urls(std::string text) {
  // Each staged file lies alone in a directory of its own: that directory stands for the
  // URL's prefix (a header's data file, a path with a '/' appended, are named right too).
  const staging& s = stage();
  for (const auto* list : {&s.inputs, &s.outputs})
    for (const staged& o : *list) {
      if (o.local == o.url) continue;
      const std::string from = fs::path(o.local).parent_path().string() + "/";
      const std::string to = url_parent(o.url);
      for (std::size_t at = text.find(from); at != std::string::npos;
           at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
    }
  return text;
}

}  // namespace ctforge::cli
