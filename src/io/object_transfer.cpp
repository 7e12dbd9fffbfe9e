// Copies between local files and s3:// objects (include/ctforge/io.hpp, "object storage").
#include "ctforge/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
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

/// The data file a detached header names (MetaImage .mhd: ElementDataFile; NRRD .nhdr: data
/// file), when it is one file beside it; empty otherwise (data inside, a list, a pattern).
std::string data_file_of(const fs::path& header) {
  std::string ext = header.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".mhd" && ext != ".nhdr") return {};
  std::ifstream in(header);
  std::string line;
  while (std::getline(in, line)) {
    const auto sep = line.find(ext == ".mhd" ? '=' : ':');
    if (sep == std::string::npos) continue;
    std::string key = line.substr(0, sep), value = line.substr(sep + 1);
    const auto trim = [](std::string& t) {
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(t.begin());
    };
    trim(key);
    trim(value);
    if (key != "ElementDataFile" && key != "data file" && key != "datafile") continue;
    if (value == "LOCAL" || value.starts_with("LIST") || value.find('%') != std::string::npos ||
        value.find(' ') != std::string::npos)
      return {};
    return safe_relative(value).empty() ? std::string() : value;
  }
  return {};
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
  // (A key ending in '/' is a folder marker some tools make, never the file itself.)
  if (!url.ends_with('/') && store.size(url) >= 0) {
    store.get_file(url, local.string());
    const std::string data = data_file_of(local);
    if (!data.empty()) {  // a detached header's data file: its sibling in the store
      const std::string sibling = url.substr(0, url.size() - name.size()) + data;
      fs::create_directories((local.parent_path() / data).parent_path());
      store.get_file(sibling, (local.parent_path() / data).string());
    }
    return local.string();
  }
  std::string prefix = url;
  if (!prefix.ends_with('/')) prefix += '/';
  std::vector<std::string> objects = store.list(prefix);
  std::erase_if(objects, [](const std::string& o) { return o.ends_with('/'); });  // markers
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
  std::vector<std::string> earlier = store.list(prefix + "/");
  for (const auto& group : {files, last})
    for (const fs::path& rel : group)
      store.put_file(prefix + "/" + rel.generic_string(), (fs::path(local) / rel).string());
  // What an earlier output under the prefix held beyond this one is removed (a longer TIFF
  // stack or DICOM series would otherwise read as part of it), after it is complete.
  std::vector<std::string> now;
  for (const auto& group : {files, last})
    for (const fs::path& rel : group) now.push_back(prefix + "/" + rel.generic_string());
  std::sort(now.begin(), now.end());
  for (const std::string& o : earlier)
    if (!o.ends_with('/') && !std::binary_search(now.begin(), now.end(), o)) store.remove(o);
}

}  // namespace ctforge::io
