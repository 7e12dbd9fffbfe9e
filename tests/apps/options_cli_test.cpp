// The command line and the library's table of algorithm-specific options
// (include/ctforge/options.hpp) cannot drift apart: `ctforge recon --help` lists every entry
// with its help text, the method options it lists are the table's, and an inapplicable option
// is refused with the algorithms it applies to. The option groups shared by the subcommands
// are declared once: the same heading and the same help text wherever they appear.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ctforge/options.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

using result = ctforge::testing::cli_result;

class OptionsCli : public ctforge::testing::cli_dir_test {
 protected:
  OptionsCli() : cli_dir_test("options_cli") {}
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

/// The lines of the option group `heading` in a `--help` text (up to the next group).
std::vector<std::string> group_lines(const std::string& help, const std::string& heading) {
  std::vector<std::string> out;
  bool inside = false;
  for (const std::string& line : lines_of(help)) {
    if (line.starts_with("[Option Group: ")) {
      inside = line == "[Option Group: " + heading + "]";
      continue;
    }
    if (inside && !line.empty() && line[0] != ' ') inside = false;  // another section
    if (inside && !line.empty()) out.push_back(line);
  }
  return out;
}

/// The long flags ("--x") that start the option lines among `lines`.
std::vector<std::string> flags_in(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  const std::regex option(R"(^\s+(?:-\w,)?(--[a-z0-9-]+))");
  for (const std::string& line : lines) {
    std::smatch m;
    if (std::regex_search(line, m, option)) out.push_back(m[1]);
  }
  return out;
}

TEST_F(OptionsCli, ReconHelpListsEveryTableOptionWithItsHelpText) {
  const result r = run("recon --help");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  for (const ctforge::recon_option& e : ctforge::recon_option_table()) {
    const std::string flag(e.flag), help(e.help);
    bool found = false;  // the description follows the flag, on its line or the next
    for (std::size_t i = 0; i < lines.size(); ++i)
      found = found || (flags_in({lines[i]}) == std::vector<std::string>{flag} &&
                        (lines[i] + (i + 1 < lines.size() ? lines[i + 1] : "")).find(help) !=
                            std::string::npos);
    EXPECT_TRUE(found) << flag << " with its help text '" << help << "'\n" << r.output;
  }
}

TEST_F(OptionsCli, ReconMethodOptionsAreTheTables) {
  const result r = run("recon --help");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> method = flags_in(group_lines(r.output, "Method"));
  const std::vector<std::string> checkpoint = flags_in(group_lines(r.output, "Checkpoint"));
  ASSERT_FALSE(method.empty()) << r.output;
  for (const std::string& flag : method) {
    const ctforge::recon_option* e = ctforge::find_recon_option(flag);
    ASSERT_NE(e, nullptr) << flag << " is listed as a method option but is not in the table";
    EXPECT_TRUE(e->needs.empty()) << flag;
  }
  std::set<std::string> listed(method.begin(), method.end());
  for (const std::string& flag : checkpoint) {
    const ctforge::recon_option* e = ctforge::find_recon_option(flag);
    if (e == nullptr) {
      EXPECT_TRUE(flag == "--checkpoint-dir" || flag == "--unit-share" || flag == "--memory-limit")
          << flag;
      continue;
    }
    EXPECT_FALSE(e->needs.empty()) << flag;
    listed.insert(flag);
  }
  std::set<std::string> table;
  for (const ctforge::recon_option& e : ctforge::recon_option_table())
    table.insert(std::string(e.flag));
  EXPECT_EQ(listed, table);
  // No table option is listed in another group.
  for (const char* heading : {"Projection input", "Grid", "Execution", "Output"})
    for (const std::string& flag : flags_in(group_lines(r.output, heading)))
      EXPECT_EQ(ctforge::find_recon_option(flag), nullptr) << flag << " under " << heading;
}

// Each option of the table, given with an algorithm it does not apply to: exit 2, the message
// naming the option, the algorithm and the algorithms it applies to.
TEST_F(OptionsCli, InapplicableOptionNamesWhereItApplies) {
  std::ofstream(dir_ / "fan.json") << R"({"type": "cone",
    "detector": {"cols": 16, "rows": 1, "pixel_mm": [2, 2]},
    "source_to_isocenter_mm": 200, "source_to_detector_mm": 400,
    "angles_deg": {"start": 0, "step": 12, "count": 30}})";
  ASSERT_EQ(run("simulate --phantom shepp-logan --phantom-size 16 --geometry fan.json "
                "-o proj.h5 --quiet")
                .status,
            0);
  const result subsets = run("recon proj.h5 -o bad.h5 --algorithm sirt --subsets 4");
  EXPECT_EQ(subsets.status, 2) << subsets.output;
  EXPECT_NE(
      subsets.output.find("--subsets: does not apply to --algorithm sirt (only to os-sart, osem)"),
      std::string::npos)
      << subsets.output;
  const std::map<std::string, std::string> values = {
      {"--filter", "hann"},  {"--displaced-detector", "on"}, {"--log-iterations", "x.csv"},
      {"--initial", "x.h5"}, {"--backprojector", "matched"}, {"--helical-q", "0.5"}};
  const ctforge::algorithm all[] = {ctforge::algorithm::fdk, ctforge::algorithm::sirt,
                                    ctforge::algorithm::os_sart, ctforge::algorithm::cgls,
                                    ctforge::algorithm::fista_tv};
  for (const ctforge::recon_option& e : ctforge::recon_option_table()) {
    const std::string flag(e.flag);
    ctforge::algorithm other = all[0];
    for (const ctforge::algorithm a : all)
      if (!ctforge::applies(e.scope, a)) {
        other = a;
        break;
      }
    ASSERT_FALSE(ctforge::applies(e.scope, other)) << flag;
    std::string value = flag == "--nonnegative" ? "" : "1";
    if (values.count(flag)) value = values.at(flag);
    const result r = run("recon proj.h5 -o bad.h5 --algorithm " + ctforge::to_string(other) + " " +
                         flag + " " + value);
    EXPECT_EQ(r.status, 2) << flag << "\n" << r.output;
    const std::string expected = flag + ": does not apply to --algorithm " +
                                 ctforge::to_string(other) + " (only to " +
                                 ctforge::algorithms_of(e.scope) + ")";
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad.h5")) << flag;
  }
}

// The projection-input group is declared once: recon, center and convert list it under the
// same heading with the same lines (convert adds its selection options to it).
TEST_F(OptionsCli, SharedGroupsReadTheSameEverywhere) {
  const result recon = run("recon --help"), center = run("center --help"),
               convert = run("convert --help"), simulate = run("simulate --help");
  for (const result* r : {&recon, &center, &convert, &simulate}) ASSERT_EQ(r->status, 0);
  const std::vector<std::string> input = group_lines(recon.output, "Projection input");
  ASSERT_GT(flags_in(input).size(), 10u) << recon.output;
  for (const char* flag : {"--geometry", "--flat", "--dark", "--data-path", "--angles",
                           "--transpose", "--pixel-size", "--bin", "--open-beam-cols"})
    EXPECT_NE(std::find(flags_in(input).begin(), flags_in(input).end(), flag),
              flags_in(input).end())
        << flag;
  EXPECT_EQ(group_lines(center.output, "Projection input"), input);
  std::vector<std::string> converted;
  for (const std::string& line : group_lines(convert.output, "Projection input")) {
    const auto f = flags_in({line});
    if (f.empty() || (f[0] != "--views" && f[0] != "--rows" && f[0] != "--cols"))
      converted.push_back(line);
  }
  EXPECT_EQ(converted, input);
  // The grid and the execution options: recon and simulate alike.
  EXPECT_EQ(flags_in(group_lines(simulate.output, "Grid")),
            flags_in(group_lines(recon.output, "Grid")));
  EXPECT_FALSE(group_lines(recon.output, "Grid").empty());
  const auto recon_exec = flags_in(group_lines(recon.output, "Execution"));
  EXPECT_EQ(flags_in(group_lines(simulate.output, "Execution")), recon_exec);
  EXPECT_EQ(flags_in(group_lines(center.output, "Execution")),
            std::vector<std::string>{"--threads"});
  for (const char* flag :
       {"--threads", "--backend", "--device", "--gpu-memory-limit", "--gpu-interpolation"})
    EXPECT_NE(std::find(recon_exec.begin(), recon_exec.end(), flag), recon_exec.end()) << flag;
  EXPECT_EQ(flags_in(group_lines(recon.output, "Output")),
            (std::vector<std::string>{"--output", "--preview", "--mu-water"}));
}

}  // namespace
