// The `ctforge` command line. Exit status: 0 success; 2 usage errors (CLI11 parse errors with
// CLI11's own message, ctforge::usage_error); 1 runtime errors (ctforge::error, any other
// exception). Runtime messages go to stderr prefixed "ctforge: error: ".
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "ctforge/error.hpp"
#include "ctforge/io.hpp"

#ifndef CTFORGE_VERSION
#define CTFORGE_VERSION "unknown"
#endif

namespace {

std::string version_text() {
#if defined(CTFORGE_WITH_CUDA)
  const char* cuda = "with the CUDA backend";
#else
  const char* cuda = "without the CUDA backend";
#endif
  return fmt::format("ctforge {} ({})", CTFORGE_VERSION, cuda);
}

int fail(int status, const char* what) {
  std::fflush(stdout);
  fmt::print(stderr, "ctforge: error: {}\n", ctforge::cli::with_object_urls(what));
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Ctrl-C / SIGTERM while an output is being written removes the half-written file.
  ctforge::io::install_interrupt_cleanup();
  CLI::App app{
      "ctforge: CT simulation and reconstruction (FDK / FBP and iterative methods, CPU and CUDA)",
      "ctforge"};
  app.set_version_flag("--version", version_text(), "Print the version and exit");
  app.require_subcommand(1);
  app.get_formatter()->column_width(34);

  std::vector<std::pair<CLI::App*, ctforge::cli::runner>> commands;
  auto add = [&](const char* name, ctforge::cli::runner r) {
    commands.emplace_back(app.get_subcommand(name), std::move(r));
  };
  add("simulate", ctforge::cli::add_simulate(app));
  add("recon", ctforge::cli::add_recon(app));
  add("info", ctforge::cli::add_info(app));
  add("compare", ctforge::cli::add_compare(app));
  add("convert", ctforge::cli::add_convert(app));
  add("preprocess", ctforge::cli::add_preprocess(app));
  add("center", ctforge::cli::add_center(app));

  // The first word must be a subcommand: name the one given (CLI11 only says "A subcommand is
  // required" for an unknown word).
  if (argc == 1 || (argc >= 2 && argv[1][0] != '-')) {
    const std::string word = argc >= 2 ? argv[1] : "";
    bool known = false;
    std::string names;
    for (const auto& [sub, run] : commands) {
      known = known || sub->get_name() == word;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (word.empty())
      return fail(2, ("a subcommand is required (" + names + "); see ctforge --help").c_str());
    if (!known)
      return fail(2, ("unknown subcommand '" + word + "' (expected " + names + ")").c_str());
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A bad option or value: the same form as every other error, naming the option.
    std::fflush(stdout);
    fmt::print(stderr, "ctforge: error: {}\nRun with --help for more information.\n", e.what());
    return 2;
  }

  try {
    ctforge::cli::fetch_object_inputs();
    for (auto& [sub, run] : commands)
      if (sub->parsed()) run();
    ctforge::cli::store_object_outputs();
    return 0;
  } catch (const ctforge::cli::stopped& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ctforge: {}\n", e.what());
    return 128 + e.signal;
  } catch (const ctforge::usage_error& e) {
    return fail(2, e.what());
  } catch (const ctforge::error& e) {
    return fail(1, e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "out of memory");
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
