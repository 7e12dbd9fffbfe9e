// Copies between local files and s3:// objects (src/io/object_transfer.hpp).
#include "io/object_transfer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ctforge/error.hpp"
#include "io/object_store.hpp"
#include "io/s3_client.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;

/// `rel` as a path below a directory, or empty when it would leave it or names no file.
fs::path safe_relative(const std::string& rel) {
  fs::path p;
  std::size_t pos = 0;
  while (pos <= rel.size()) {
    const std::size_t slash = std::min(rel.find('/', pos), rel.size());
    const std::string part = rel.substr(pos, slash - pos);
    if (part.empty() || part == "." || part == "..") return {};
    p /= part;
    pos = slash + 1;
  }
  return p;
}

bool is_top_metadata(const fs::path& rel) {
  const std::string n = rel.string();
  return n == "zarr.json" || n == ".zarray" || n == ".zattrs" || n == ".zgroup";
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  CTFORGE_CHECK(in.good() || in.eof(), fmt::format("{}: cannot read", file.string()));
  return ss.str();
}

/// zarr.json of an array marked complete, marked incomplete (empty when it is not so marked).
std::string marked_incomplete(const fs::path& zarr_json) {
  nlohmann::json j = nlohmann::json::parse(read_text(zarr_json), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("attributes")) return {};
  nlohmann::json& a = j["attributes"];
  if (!a.is_object() || a.value("ctforge_complete", nlohmann::json()) != true) return {};
  a["ctforge_complete"] = false;
  return j.dump(2);
}

}  // namespace

std::string object_name(const std::string& url) {
  std::string key = resolve_s3_object(url).key;
  while (!key.empty() && key.back() == '/') key.pop_back();
  const auto slash = key.rfind('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

std::string download(const std::string& url, const std::string& dir) {
  s3::client store;
  const std::string name = object_name(url);
  CTFORGE_EXPECTS(!name.empty(), url + ": expected s3://bucket/key");
  const fs::path local = fs::path(dir) / name;
  if (store.size(url) >= 0) {
    store.get_file(url, local.string());
    return local.string();
  }
  std::string prefix = url;
  if (!prefix.ends_with('/')) prefix += '/';
  const std::vector<std::string> objects = store.list(prefix);
  CTFORGE_CHECK(!objects.empty(), fmt::format("{}: no such object, and no object under {}", url,
                                              prefix));
  for (const std::string& o : objects) {
    const fs::path rel = safe_relative(o.substr(prefix.size()));
    CTFORGE_CHECK(!rel.empty(), fmt::format("{}: the key of {} is not a path below {} (an empty "
                                            "or '..' component)",
                                            url, o, prefix));
    fs::create_directories((local / rel).parent_path());
    store.get_file(o, (local / rel).string());
  }
  return local.string();
}

void upload(const std::string& local, const std::string& url) {
  s3::client store;
  std::error_code ec;
  if (!fs::is_directory(local, ec)) {
    store.put_file(url, local);
    return;
  }
  std::string prefix = url;
  while (prefix.ends_with('/')) prefix.pop_back();
  std::vector<fs::path> files, last;
  for (const auto& e : fs::recursive_directory_iterator(local)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), local);
    (is_top_metadata(rel) ? last : files).push_back(rel);
  }
  std::sort(files.begin(), files.end());
  std::sort(last.begin(), last.end());
  const fs::path zarr_json = fs::path(local) / "zarr.json";
  if (fs::exists(zarr_json, ec)) {
    const std::string incomplete = marked_incomplete(zarr_json);
    if (!incomplete.empty()) store.put_text(prefix + "/zarr.json", incomplete);
  }
  for (const auto& group : {files, last})
    for (const fs::path& rel : group)
      store.put_file(prefix + "/" + rel.generic_string(), (fs::path(local) / rel).string());
}

}  // namespace ctforge::io
