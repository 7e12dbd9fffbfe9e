// Third-party parsers in a child process first (contained.hpp).
#include "io/contained.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ctforge/error.hpp"

// Sanitizer runtimes (the asan preset, fuzzing) report through a death callback that libFuzzer
// sets to save the input as a crash; the child clears it, so that only the parent decides.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace ctforge::detail {
namespace {

bool g_in_child = false;
std::mutex g_mutex;
std::set<std::string> g_probed;               // keys of files found sound
std::map<std::string, std::string> g_refused;  // keys of files refused, with the reason

/// A key for the file's current content: the bytes' hash for small files, else its identity.
std::string file_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode)) {  // a series: every entry's identity
    std::string key = "d:" + path;
    std::error_code ec;
    std::vector<std::string> entries;
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      struct stat es {};
      if (::stat(e.path().c_str(), &es) == 0)
        entries.push_back(fmt::format("{}:{}:{}:{}.{}", e.path().filename().string(), es.st_ino,
                                      es.st_size, es.st_mtim.tv_sec, es.st_mtim.tv_nsec));
    }
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) key += "|" + e;
    return key;
  }
  if (st.st_size <= (1 << 20)) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes(static_cast<std::size_t>(st.st_size));
    if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return {};
    std::uint64_t h = 1469598103934665603ull;
    for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return fmt::format("h:{}:{:016x}", bytes.size(), h);
  }
  return fmt::format("f:{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

[[noreturn]] void child(const std::function<void()>& probe, pid_t parent) {
  g_in_child = true;
  // A parent that dies (killed, timed out) takes its probe with it: a parser looping on a
  // corrupt file must not outlive it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(0);  // it died before the line above
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {  // the parent's own parse reports what is wrong, once
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  try {
    probe();
  } catch (...) {
    // An error the parser reports is no crash.
  }
  ::_exit(0);
}

}  // namespace

bool in_probe_child() noexcept {
  return g_in_child;
}

double default_probe_timeout() {
  const char* env = std::getenv("CTFORGE_PARSE_TIMEOUT");
  if (env != nullptr) {
    char* end = nullptr;
    const double t = std::strtod(env, &end);
    if (end != env && t > 0) return t;
  }
  return 10;
}

void probe_in_child(const std::string& path, const char* library,
                    const std::function<void()>& probe, double timeout_s) {
  if (timeout_s <= 0) timeout_s = default_probe_timeout();
  if (g_in_child) {
    probe();
    return;
  }
  const std::string key = file_key(path);
  if (key.empty()) return;  // unreadable: the caller's own open says so
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (g_probed.count(key)) return;
    if (const auto it = g_refused.find(key); it != g_refused.end())
      CTFORGE_FAIL(fmt::format("{}: corrupt file: {}; refused", path, it->second));
  }
  const auto refuse = [&](const std::string& reason) {
    {
      const std::lock_guard<std::mutex> lock(g_mutex);
      g_refused[key] = reason;
    }
    CTFORGE_FAIL(fmt::format("{}: corrupt file: {}; refused", path, reason));
  };
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return;  // no process to spare: parse without the check
  if (pid == 0) child(probe, parent);
  int status = 0;
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        timeout_s) {
      // libhdf5 loops for ever on some corrupt files (a global heap it walks in circles): the
      // same parse here would never return either.
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      refuse(fmt::format("{} did not finish parsing its headers within {:g} s "
                         "(CTFORGE_PARSE_TIMEOUT=seconds allows more on a slow file system)",
                         library, timeout_s));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_probed.insert(key);
    return;
  }
  const std::string how =
      WIFSIGNALED(status)
          ? fmt::format("signal {}, {}", WTERMSIG(status), ::strsignal(WTERMSIG(status)))
          : fmt::format("exit status {}", WEXITSTATUS(status));
  refuse(fmt::format("{} crashed while parsing it ({})", library, how));
}

namespace {

/// Reads the first elements of a numeric dataset: along the last axis of the first row for a
/// dataset of rank >= 1 (a few chunks at most), the one value of a scalar (rank 0) dataset.
void touch_numeric_dataset(hid_t obj, hid_t space, int rank) {
  if (rank == 0) {
    double v = 0;
    H5Dread(obj, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
    return;
  }
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), start(dims.size(), 0),
      count(dims.size(), 1);
  if (H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) return;
  count.back() = std::min<hsize_t>(dims.back(), 4096);
  std::vector<double> v(static_cast<std::size_t>(count.back()));
  const hid_t mem = H5Screate_simple(1, &count.back(), nullptr);
  if (mem < 0) return;
  if (H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >=
      0)
    H5Dread(obj, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, v.data());
  H5Sclose(mem);
}

/// Reads one string (variable or fixed length) of a dataset or attribute with one element.
void touch_string(hid_t obj, hid_t type, bool attribute) {
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    const herr_t ok = attribute ? H5Aread(obj, type, &s)
                                : H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s);
    if (ok >= 0 && s) H5free_memory(s);
    return;
  }
  const size_t size = H5Tget_size(type);
  if (size == 0 || size > (1u << 20)) return;
  std::vector<char> s(size + 1);
  if (attribute)
    H5Aread(obj, type, s.data());
  else
    H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data());
}

/// Reads a few elements of a numeric dataset or attribute (as double) or of a string one (its
/// own type), so that the data path of the parser runs too. Datasets and attributes of every
/// valid shape are handled: scalar (rank 0), empty (no elements), null dataspace.
void touch_values(hid_t obj, bool attribute) {
  const hid_t type = attribute ? H5Aget_type(obj) : H5Dget_type(obj);
  const hid_t space = attribute ? H5Aget_space(obj) : H5Dget_space(obj);
  if (type < 0 || space < 0) {
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return;
  }
  const H5T_class_t cls = H5Tget_class(type);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (n > 0 && rank >= 0 && rank <= 32) {
    if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
      if (!attribute) {
        touch_numeric_dataset(obj, space, rank);
      } else if (n <= 4096) {
        std::vector<double> v(static_cast<std::size_t>(n));
        H5Aread(obj, H5T_NATIVE_DOUBLE, v.data());
      }
    } else if (cls == H5T_STRING && n == 1) {
      touch_string(obj, type, attribute);
    }
  }
  H5Tclose(type);
  H5Sclose(space);
}

herr_t visit_attribute(hid_t obj, const char* name, const H5A_info_t*, void*) {
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a >= 0) {
    touch_values(a, /*attribute=*/true);
    H5Aclose(a);
  }
  return 0;
}

herr_t visit_link(hid_t file, const char* name, const H5L_info_t* info, void*) {
  if (info->type != H5L_TYPE_HARD) return 0;
  const hid_t o = H5Oopen(file, name, H5P_DEFAULT);
  if (o < 0) return 0;
  hsize_t idx = 0;
  H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attribute, nullptr);
  if (H5Iget_type(o) == H5I_DATASET) {
    const hid_t plist = H5Dget_create_plist(o);
    if (plist >= 0) {
      H5Pget_layout(plist);
      const int filters = H5Pget_nfilters(plist);
      for (int i = 0; i < filters && i < 32; ++i) {
        unsigned flags = 0, config = 0;
        size_t nelmts = 0;
        char fname[64];
        H5Pget_filter2(plist, static_cast<unsigned>(i), &flags, &nelmts, nullptr, sizeof fname,
                       fname, &config);
      }
      H5Pclose(plist);
    }
    touch_values(o, /*attribute=*/false);
  }
  H5Oclose(o);
  return 0;
}

}  // namespace

void probe_hdf5_file(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return;
  hsize_t root_idx = 0;
  H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &root_idx, visit_attribute, nullptr);
  H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, visit_link, nullptr);
  H5Fclose(f);
}

}  // namespace ctforge::detail
