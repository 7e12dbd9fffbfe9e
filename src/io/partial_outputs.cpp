// The output layer (see ctforge/detail/atomic_write.hpp): temporary names, commit by rename,
// and removal of half-written outputs when the process is interrupted. The signal handler only
// reads a fixed table and calls open/getdents64/unlinkat/unlink/rmdir, which are
// async-signal-safe system calls.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>

#include "ctforge/io.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;

constexpr int k_slots = 64;
constexpr std::size_t k_path_bytes = 4096;

enum : int { k_free = 0, k_filling = 1, k_file = 2, k_directory = 3 };
char g_paths[k_slots][k_path_bytes];
std::atomic<int> g_state[k_slots];
std::atomic<unsigned> g_counter{0};

struct dirent64_raw {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

// Removes what the directory `name` (relative to `at`) holds, directories `depth` levels deep at
// most, then the directory itself (async-signal-safe: open, getdents64, unlinkat, close).
void remove_tree_at(int at, const char* name, int depth) {
  for (int pass = 0; pass < 8; ++pass) {
    const int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) break;
    alignas(8) char buf[2048];
    bool any = false;
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const dirent64_raw*>(buf + off);
        const char* entry = d->d_name;
        if (!(entry[0] == '.' && (entry[1] == 0 || (entry[1] == '.' && entry[2] == 0)))) {
          // (File systems that do not say an entry's type: a directory is what unlinkat
          // refuses with EISDIR.)
          if (d->d_type == DT_DIR ||
              (::unlinkat(fd, entry, 0) != 0 && errno == EISDIR && d->d_type == DT_UNKNOWN)) {
            if (depth > 0) remove_tree_at(fd, entry, depth - 1);
          }
          any = true;
        }
        off += d->d_reclen;
      }
    }
    ::close(fd);
    if (!any) break;
  }
  ::unlinkat(at, name, AT_REMOVEDIR);
}

// `dir` and everything in it, 16 directory levels deep (a staging directory holding Zarr
// arrays: stage/out-0/vol.zarr/c/0/0/0).
void remove_directory_tree(const char* dir) { remove_tree_at(AT_FDCWD, dir, 16); }

extern "C" void remove_partial_outputs(int sig) {
  const int saved_errno = errno;
  for (int i = 0; i < k_slots; ++i) {
    const int st = g_state[i].load(std::memory_order_acquire);
    if (st == k_file) ::unlink(g_paths[i]);
    if (st == k_directory) remove_directory_tree(g_paths[i]);
  }
  // SA_RESETHAND restored the default action; the signal is blocked while this handler runs,
  // so the re-raised signal terminates the process as soon as the handler returns.
  errno = saved_errno;
  ::raise(sig);
}

// The (possibly double) extension of a file name: ".nii.gz", ".mha", "" for none.
std::string extension_of(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* dbl : {".nii.gz", ".raw.gz", ".tar.gz"})
    if (lower.size() > std::strlen(dbl) && lower.ends_with(dbl))
      return name.substr(name.size() - std::strlen(dbl));
  return fs::path(name).extension().string();
}

// This machine's name as it may stand in a file name (letters, digits, '-', '_', '.'; at most
// 64 characters): processes on several machines (the pods of a Kubernetes Job, each often
// process 1 of its own container) may write beside one another on a shared file system. When
// the process id namespace is known, "_" and its number in hexadecimal follow: containers of one
// machine sharing its name (host networking) number their processes apart, and a writer's
// process id says whether it still runs only within its own namespace
// (remove_orphaned_temporaries).
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[256] = {};
    std::string t;
    if (::gethostname(name, sizeof name - 1) == 0)
      for (const char* c = name; *c && t.size() < 64; ++c)
        if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_' || *c == '.')
          t += *c;
    if (t.empty()) t = "host";
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) == 0) t += fmt::format("_{:x}", st.st_ino);
    return t;
  }();
  return tag;
}

std::string unique_sibling(const std::string& final_path, const char* tag, bool keep_extension) {
  const fs::path p(final_path);
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();  // "dir/" -> "dir"
  const std::string ext = keep_extension ? extension_of(name) : std::string();
  const std::string stem = name.substr(0, name.size() - ext.size());
  const std::string leaf = fmt::format(".{}.{}-{}-{}.{}{}", stem, host_tag(), ::getpid(),
                                       g_counter.fetch_add(1, std::memory_order_relaxed), tag, ext);
  const fs::path parent = p.filename().empty() ? p.parent_path().parent_path() : p.parent_path();
  return (parent / leaf).string();
}

std::string parent_of(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& action, int err) {
  CTFORGE_FAIL(fmt::format("{}: {}: {}", what, action, std::strerror(err)));
}

void rename_or_fail(const std::string& from, const std::string& to, const std::string& what) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_errno(what, fmt::format("cannot rename {} into place", from), errno);
}

}  // namespace

int register_partial_output(const std::string& path, bool directory) {
  if (path.empty() || path.size() >= k_path_bytes) return -1;
  for (int i = 0; i < k_slots; ++i) {
    int expected = k_free;
    if (g_state[i].compare_exchange_strong(expected, k_filling, std::memory_order_acq_rel)) {
      std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
      g_state[i].store(directory ? k_directory : k_file, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_partial_output(int slot) {
  if (slot >= 0 && slot < k_slots) g_state[slot].store(k_free, std::memory_order_release);
}

void install_interrupt_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = remove_partial_outputs;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  // SIGABRT too: a library that aborts on an error it cannot report (GDCM on a short write)
  // still leaves no temporary behind.
  // A signal the process was started ignoring (nohup, a background job's SIGINT) stays ignored.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGABRT}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

void write_file_bytes(const std::string& path, const void* data, std::size_t n,
                      const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(what, fmt::format("cannot create {}", path), errno);
  const auto* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, std::min<std::size_t>(n - done, std::size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      ::close(fd);
      fail_errno(what, fmt::format("write failed after {} of {} bytes", done, n), err);
    }
    done += static_cast<std::size_t>(w);
  }
  if (::close(fd) != 0) fail_errno(what, "closing failed", errno);
}

void sync_path(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(what, fmt::format("cannot open {} to flush it", path), errno);
  const int st = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories (EINVAL): nothing to flush there.
  if (st != 0 && err != EINVAL && err != EROFS)
    fail_errno(what, fmt::format("cannot flush {} to the device", path), err);
}

temporary_output::temporary_output(std::string final_path, bool directory)
    : final_(std::move(final_path)), directory_(directory) {
  // What killed writers of this machine left beside it (no handler runs on SIGKILL).
  {
    const fs::path p(final_);
    const fs::path parent = p.filename().empty() ? p.parent_path().parent_path() : p.parent_path();
    // Once per directory and process, and only those whose process is known to be gone: an
    // output's temporary may live for hours (a volume written slab by slab), so another
    // machine's is never taken for an orphan by its age.
    remove_orphaned_temporaries_once(parent.empty() ? "." : parent.string(), {""},
                                     std::numeric_limits<double>::infinity());
  }
  // A name left by a killed run of the same pid (containers reuse pids) is never reused: its
  // stale files would be published by the commit.
  for (int attempt = 0;; ++attempt) {
    tmp_ = unique_sibling(final_, "part", !directory);
    std::error_code ec;
    if (directory_) {
      if (fs::create_directory(tmp_, ec)) break;
      if (ec || attempt > 1000)
        CTFORGE_FAIL(fmt::format("{}: cannot create the temporary directory {}: {}", final_, tmp_,
                                 ec ? ec.message() : std::string("exists")));
    } else {
      if (!fs::exists(fs::symlink_status(tmp_, ec))) break;
      if (attempt > 1000) CTFORGE_FAIL(fmt::format("{}: no free temporary name beside it", final_));
    }
  }
  slot_ = register_partial_output(tmp_, directory_);
}

temporary_output::~temporary_output() {
  if (!done_) {
    std::error_code ec;
    if (directory_)
      fs::remove_all(tmp_, ec);
    else
      fs::remove(tmp_, ec);
  }
  unregister_partial_output(slot_);
}

void temporary_output::commit() {
  CTFORGE_EXPECTS(!directory_, "temporary_output::commit: a directory output");
  sync_path(tmp_, final_);
  rename_or_fail(tmp_, final_, final_);
  done_ = true;
  sync_path(parent_of(final_), final_);
}

void temporary_output::commit_directory() {
  CTFORGE_EXPECTS(directory_, "temporary_output::commit_directory: a file output");
  std::error_code ec;
  // Every file, then every directory below, deepest first (a Zarr array's shards sit three
  // levels down), then the directory itself.
  std::vector<std::string> dirs;
  for (auto it = fs::recursive_directory_iterator(tmp_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec))
      sync_path(it->path().string(), final_);
    else if (it->is_directory(ec))
      dirs.push_back(it->path().string());
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) sync_path(*d, final_);
  sync_path(tmp_, final_);
  std::string target = final_;
  while (target.size() > 1 && target.ends_with('/')) target.pop_back();
  std::string old;
  if (fs::exists(target, ec)) {
    CTFORGE_CHECK(fs::is_directory(target, ec),
                  fmt::format("{}: exists and is not a directory; not replaced", target));
    // Swap the two directories in one step: at every instant the final name holds a complete
    // series, the old or the new one. The temporary then holds the old one and is removed
    // (by the destructor, or by the signal handler, which still has it registered).
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      sync_path(parent_of(target), target);
      return;  // done_ stays false: the destructor removes the old directory now at tmp_
    }
    // File systems without RENAME_EXCHANGE: move the old one aside first (a short window).
    old = unique_sibling(target, "old", false);
    rename_or_fail(target, old, target);
  }
  if (::rename(tmp_.c_str(), target.c_str()) != 0) {
    const int err = errno;
    if (!old.empty()) (void)::rename(old.c_str(), target.c_str());  // put the old one back
    fail_errno(target, fmt::format("cannot rename {} into place", tmp_), err);
  }
  done_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
  sync_path(parent_of(target), target);
}

void temporary_output::commit_files(const std::vector<std::string>& order) {
  CTFORGE_EXPECTS(directory_, "temporary_output::commit_files: a file output");
  const std::string dest = parent_of(final_);
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp_, ec))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  // Files not named in `order` first (data files the library chose), then `order`.
  std::vector<std::string> sequence;
  for (const auto& n : names)
    if (std::find(order.begin(), order.end(), n) == order.end()) sequence.push_back(n);
  for (const auto& n : order)
    if (std::find(names.begin(), names.end(), n) != names.end()) sequence.push_back(n);
  for (const auto& n : sequence) sync_path((fs::path(tmp_) / n).string(), final_);
  for (const auto& n : sequence)
    rename_or_fail((fs::path(tmp_) / n).string(), (fs::path(dest) / n).string(), final_);
  done_ = true;
  fs::remove_all(tmp_, ec);
  sync_path(dest, final_);
}

namespace {

// The writer of a temporary ".<stem>.<host>-<pid>-<n>.part<ext>": its host and process, or
// nothing when the name is not of that form.
struct temporary_writer {
  std::string host_and_stem;  // ".<stem>.<host>": the host is its tail after the last stem dot
  long pid = 0;
};

std::optional<temporary_writer> writer_of(const std::string& name) {
  const std::size_t part = name.rfind(".part");
  if (name.empty() || name[0] != '.' || part == std::string::npos) return std::nullopt;
  const std::string head = name.substr(0, part);  // .<stem>.<host>-<pid>-<n>
  const std::size_t d2 = head.rfind('-');
  const std::size_t d1 = d2 == std::string::npos || d2 == 0 ? std::string::npos
                                                            : head.rfind('-', d2 - 1);
  if (d1 == std::string::npos) return std::nullopt;
  const std::string pid = head.substr(d1 + 1, d2 - d1 - 1), n = head.substr(d2 + 1);
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.size() < 12 &&
           std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!digits(pid) || !digits(n)) return std::nullopt;
  return temporary_writer{head.substr(0, d1), std::stol(pid)};
}

bool process_is_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

void remove_orphaned_temporaries_once(const std::string& dir,
                                     const std::vector<std::string>& prefixes,
                                     double foreign_age_s) {
  static std::mutex m;
  static std::set<std::string> done;
  std::error_code ec;
  std::string key = fs::absolute(dir, ec).lexically_normal().string();
  if (ec) key = dir;
  key += fmt::format("\n{}\n{}", fmt::join(prefixes, "\n"), foreign_age_s);
  {
    const std::lock_guard<std::mutex> lock(m);
    if (!done.insert(key).second) return;
  }
  remove_orphaned_temporaries(dir, prefixes, foreign_age_s);
}

int remove_orphaned_temporaries(const std::string& dir, const std::vector<std::string>& prefixes,
                                double foreign_age_s) {
  int removed = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = std::any_of(prefixes.begin(), prefixes.end(),
                                  [&](const std::string& p) { return name.starts_with("." + p); });
    const std::optional<temporary_writer> w = ours ? writer_of(name) : std::nullopt;
    if (!w) continue;
    std::error_code tec;
    const auto mtime = fs::last_write_time(e.path(), tec);
    if (tec) continue;
    const double age = std::chrono::duration<double>(now - mtime).count();
    const bool here = w->host_and_stem.ends_with("." + host_tag());
    if ((here && process_is_gone(w->pid)) || age > foreign_age_s)
      removed += fs::remove_all(e.path(), tec) > 0 && !tec;
  }
  return removed;
}

}  // namespace ctforge::io
