// The table of algorithm-specific reconstruction options (include/ctforge/options.hpp).
#include "ctforge/options.hpp"

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "ctforge/error.hpp"

namespace ctforge {
namespace {

constexpr algorithm k_all[] = {algorithm::fdk,     algorithm::fbp,      algorithm::sirt,
                               algorithm::os_sart, algorithm::cgls,     algorithm::fista_tv,
                               algorithm::osem,    algorithm::helical_fbp};

// Names and flags are unique, and every flag but the CSV log's is the keyword spelled with
// dashes (the Python keyword and the command-line option name the same thing).
TEST(ReconOptionTable, NamesAndFlagsAreUniqueAndSpelledAlike) {
  std::set<std::string_view> names, flags;
  for (const recon_option& o : recon_option_table()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    EXPECT_TRUE(flags.insert(o.flag).second) << o.flag;
    EXPECT_FALSE(o.help.empty()) << o.name;
    std::string dashed = "--" + std::string(o.name);
    for (char& c : dashed) c = c == '_' ? '-' : c;
    if (o.name != "return_log") EXPECT_EQ(o.flag, dashed);
    EXPECT_EQ(find_recon_option(o.name), &o);
    EXPECT_EQ(find_recon_option(o.flag), &o);
    // Every option applies to some algorithm and not to all (else it is no method option).
    int n = 0;
    for (algorithm a : k_all) n += applies(o.scope, a);
    EXPECT_GT(n, 0) << o.name;
    EXPECT_LT(n, static_cast<int>(std::size(k_all))) << o.name;
  }
  EXPECT_EQ(find_recon_option("threads"), nullptr);
}

// The applicability the command line has always enforced, method by method.
TEST(ReconOptionTable, AppliesAsDocumented) {
  EXPECT_TRUE(option_applies("--subsets", algorithm::os_sart));
  EXPECT_TRUE(option_applies("subsets", algorithm::osem));
  EXPECT_FALSE(option_applies("subsets", algorithm::sirt));
  EXPECT_TRUE(option_applies("relaxation", algorithm::sirt));
  EXPECT_FALSE(option_applies("relaxation", algorithm::cgls));
  EXPECT_TRUE(option_applies("tv_weight", algorithm::fista_tv));
  EXPECT_FALSE(option_applies("tv_iterations", algorithm::osem));
  EXPECT_TRUE(option_applies("filter", algorithm::fbp));
  EXPECT_FALSE(option_applies("filter", algorithm::sirt));
  EXPECT_TRUE(option_applies("unit_planes", algorithm::fdk));
  EXPECT_FALSE(option_applies("checkpoint_every", algorithm::fdk));
  EXPECT_TRUE(option_applies("helical_q", algorithm::helical_fbp));
  EXPECT_FALSE(option_applies("helical_q", algorithm::fdk));
  EXPECT_TRUE(option_applies("filter", algorithm::helical_fbp));
  EXPECT_FALSE(option_applies("displaced_detector", algorithm::helical_fbp));
  for (algorithm a : k_all) {
    EXPECT_EQ(option_applies("iterations", a), is_iterative(a)) << to_string(a);
    EXPECT_EQ(option_applies("--cutoff", a), !is_iterative(a)) << to_string(a);
  }
  EXPECT_THROW(option_applies("--threads", algorithm::fdk), usage_error);
}

TEST(ReconOptionTable, RefusalNamesOptionAlgorithmAndWhereItApplies) {
  EXPECT_NO_THROW(require_option_applies("subsets", algorithm::osem, "subsets"));
  try {
    require_option_applies("--subsets", algorithm::sirt, "--subsets");
    FAIL() << "no usage_error";
  } catch (const usage_error& e) {
    EXPECT_STREQ(e.what(),
                 "--subsets: does not apply to --algorithm sirt (only to os-sart, osem)");
  }
  try {
    require_option_applies("filter", algorithm::cgls, "filter");
    FAIL() << "no usage_error";
  } catch (const usage_error& e) {
    EXPECT_STREQ(e.what(), "filter: does not apply to algorithm cgls (only to fdk, fbp, helical-fbp)");
  }
}

}  // namespace
}  // namespace ctforge
