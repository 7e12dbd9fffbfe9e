// The output layer every writer goes through (see io.hpp, write_atomically).
//
// An output is written under a temporary name of its own in the destination directory
// (".<name>.<host>-<pid>-<n>.part<ext>": hidden, unique per machine, process and call, with the
// final extension so that format libraries recognise it), checked, flushed to the device (fsync)
// and renamed into place; multi-file outputs are written into a temporary directory, a header and
// its data file then moved into place file by file (data before header), a directory output (a
// DICOM series, a TIFF stack) exchanged with the earlier directory in one step. Until then nothing
// under the final name is touched: a failed or interrupted run removes its temporaries (also on
// SIGINT, SIGTERM, SIGHUP and SIGABRT through install_interrupt_cleanup) and leaves any earlier
// output as it was; concurrent writers of one name cannot disturb each other (the last to finish
// wins).
#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "ctforge/error.hpp"

namespace ctforge::io {

/// Registers `path` (a file, or with `directory` a directory and all it holds, 16 levels deep) as an output
/// being written. If the process is then stopped by SIGINT, SIGTERM, SIGHUP or SIGABRT after
/// install_interrupt_cleanup(), the handler removes it before the signal ends the process.
/// Returns a slot for unregister_partial_output, or -1 when the table is full (then it is
/// simply not cleaned up). Thread-safe.
int register_partial_output(const std::string& path, bool directory = false);
void unregister_partial_output(int slot);
/// Installs the SIGINT / SIGTERM / SIGHUP / SIGABRT handlers that remove registered outputs and
/// then let the signal terminate the process as it would have (same exit status).
void install_interrupt_cleanup();

/// A temporary output beside `final_path` (see the file comment). Move-only; the destructor
/// removes whatever was not committed.
class temporary_output {
 public:
  /// `directory`: a temporary directory (for multi-file outputs); otherwise a file name.
  explicit temporary_output(std::string final_path, bool directory = false);
  temporary_output(temporary_output&&) = delete;
  temporary_output& operator=(temporary_output&&) = delete;
  ~temporary_output();

  /// The temporary file, or the temporary directory.
  const std::string& path() const noexcept { return tmp_; }
  const std::string& final_path() const noexcept { return final_; }

  /// File output: fsyncs the temporary, renames it to the final path and fsyncs the directory.
  /// Throws ctforge::error naming the final path and the cause.
  void commit();
  /// Directory output whose final path is a directory: replaces it as a unit (an existing one is
  /// moved aside, the new one renamed in, the old one removed).
  void commit_directory();
  /// Directory output holding files that go beside the final path (a header and its data
  /// file): moves the files named in `order` (names inside the temporary directory) into the
  /// final path's directory in that order (data files first, the header last), fsyncing each.
  void commit_files(const std::vector<std::string>& order);

 private:
  std::string final_, tmp_;
  bool directory_ = false, done_ = false;
  int slot_ = -1;
};

/// Removes the temporaries that writers which no longer run left in `dir` (a process killed by
/// SIGKILL or OOM, a lost machine): among the temporaries of files whose names start with one of
/// `prefixes`, those of this machine whose process is gone, and those of any machine unmodified
/// for `foreign_age_s` seconds (a writer keeps its temporary seconds, between writing the data and
/// renaming it). Returns how many were removed; a file that cannot be removed is left as is.
int remove_orphaned_temporaries(const std::string& dir, const std::vector<std::string>& prefixes,
                                double foreign_age_s);
/// remove_orphaned_temporaries, the first time this process asks it for these arguments only
/// (a directory is listed once, not on every write into it). temporary_output asks it for the
/// destination directory with every name ("") and no age (infinity): the temporaries this
/// machine's killed writers left, of any name. Another machine's are left alone there whatever
/// their age, since an output's temporary may live for hours (a volume written slab by slab);
/// checkpoint directories, whose temporaries live seconds, also apply the age rule.
void remove_orphaned_temporaries_once(const std::string& dir,
                                     const std::vector<std::string>& prefixes,
                                     double foreign_age_s);

/// Creates (truncating) `path` and writes `n` bytes to it with every write checked (a full disk,
/// a short write, a file size limit): throws ctforge::error naming `what` and the cause.
void write_file_bytes(const std::string& path, const void* data, std::size_t n,
                      const std::string& what);

/// fsyncs a file or directory; throws ctforge::error naming `what` on failure.
void sync_path(const std::string& path, const std::string& what);

/// Writes `path` atomically: write(tmp) writes the whole output to `tmp` (which it must check:
/// every failure must throw), then the temporary is flushed to the device and renamed over
/// `path`; on any error it is removed and `path` is left as it was.
template <class F>
void write_atomically(const std::string& path, F&& write) {
  temporary_output out(path);
  write(out.path());
  out.commit();
}

}  // namespace ctforge::io
