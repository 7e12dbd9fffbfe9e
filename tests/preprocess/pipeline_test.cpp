// The preprocessing steps together (include/ctforge/preprocess.hpp): the option table that the
// command line and Python spell them from, the options parsed from it, the steps applied in
// order, and the rows of margin a band needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using settings = std::vector<preprocess_setting>;

TEST(PreprocessOptions, TableNamesAndFlagsAreUniqueAndMatch) {
  std::set<std::string> names, flags;
  for (const preprocess_option& e : preprocess_option_table()) {
    EXPECT_TRUE(names.insert(std::string(e.name)).second) << e.name;
    EXPECT_TRUE(flags.insert(std::string(e.flag)).second) << e.flag;
    // The flag is the name spelled for a command line: --ring-size <-> ring_size.
    std::string spelled = "--" + std::string(e.name);
    for (char& c : spelled)
      if (c == '_') c = '-';
    EXPECT_EQ(spelled, e.flag);
    EXPECT_FALSE(e.help.empty()) << e.name;
    if (!e.step.empty()) EXPECT_TRUE(names.count(std::string(e.step))) << e.name;
  }
}

TEST(PreprocessOptions, NothingGivenMeansNoStep) {
  const preprocess_options o = parse_preprocess_options({});
  EXPECT_TRUE(o.empty());
  EXPECT_TRUE(preprocess_settings(o).empty());
  EXPECT_EQ(preprocess_row_margin(o), 0);
}

// Names and flags set the same fields; the settings read back as given, defaults included.
TEST(PreprocessOptions, NamesAndFlagsSetTheSameFields) {
  const preprocess_options a = parse_preprocess_options(settings{{"zingers", "0.25"},
                                                                 {"zinger_size", "5"},
                                                                 {"zinger_views", "3"},
                                                                 {"rings", "large"},
                                                                 {"ring_la_size", "31"},
                                                                 {"ring_snr", "2.5"},
                                                                 {"ring_drop_ratio", "0.2"}});
  const preprocess_options b = parse_preprocess_options(settings{{"--ring-drop-ratio", "0.2"},
                                                                 {"--ring-snr", "2.5"},
                                                                 {"--ring-la-size", "31"},
                                                                 {"--rings", "large"},
                                                                 {"--zinger-views", "3"},
                                                                 {"--zinger-size", "5"},
                                                                 {"--zingers", "0.25"}});
  ASSERT_TRUE(a.zingers && a.rings && b.zingers && b.rings);
  EXPECT_EQ(a.zingers->threshold, 0.25);
  EXPECT_EQ(a.zingers->size, 5);
  EXPECT_EQ(a.zingers->views, 3);
  EXPECT_EQ(a.rings->method, stripe_method::large);
  EXPECT_EQ(a.rings->la_size, 31);
  EXPECT_EQ(a.rings->snr, 2.5);
  EXPECT_EQ(a.rings->drop_ratio, 0.2);
  const settings sa = preprocess_settings(a), sb = preprocess_settings(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].spelling, sb[i].spelling);
    EXPECT_EQ(sa[i].value, sb[i].value);
  }
  // Parsing the settings back gives the same settings (the run record's round trip).
  const settings again = preprocess_settings(parse_preprocess_options(sa));
  ASSERT_EQ(again.size(), sa.size());
  for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(again[i].value, sa[i].value);
  // Only the options of the chosen method are listed: large has no --ring-size or sigma.
  for (const preprocess_setting& s : sa) EXPECT_NE(s.spelling, "ring_sigma");
  EXPECT_EQ(preprocess_row_margin(a), 2);  // the 5 x 5 window's rows about the pixel
}

TEST(PreprocessOptions, BadOptionsNameTheirSpelling) {
  // Each case: the settings given, and what the usage error must name.
  const std::vector<std::pair<settings, std::string>> cases{
      {{{"--ring-size", "21"}}, "--ring-size: needs --rings"},
      {{{"ring_size", "21"}}, "ring_size: needs rings"},
      {{{"--zinger-views", "3"}}, "--zinger-views: needs --zingers"},
      {{{"--rings", "filtering"}, {"--ring-la-size", "51"}},
       "--ring-la-size: applies to --rings large/dead/all only"},
      {{{"--rings", "sorting"}, {"--ring-sigma", "2"}},
       "--ring-sigma: applies to --rings filtering/fourier_wavelet only"},
      {{{"--rings", "median"}}, "--rings: unknown method 'median'"},
      {{{"rings", "median"}}, "rings: unknown method"},
      {{{"--zingers", "-1"}}, "--zingers: must be positive"},
      {{{"--zingers", "0.3x"}}, "--zingers: expected a number"},
      {{{"--zingers", "nan"}}, "--zingers: expected a number"},
      {{{"--zingers", "1"}, {"--zinger-size", "4"}}, "--zinger-size: an odd window of 3 to 99"},
      {{{"--zingers", "1"}, {"--zinger-views", "0"}}, "--zinger-views: an odd window of 1 to 99"},
      {{{"--rings", "all"}, {"--ring-drop-ratio", "0.9"}},
       "--ring-drop-ratio: must be in [0, 0.8]"},
      {{{"--zingers", "1"}, {"zingers", "2"}}, "zingers: given twice"},
      {{{"--ring", "all"}}, "--ring: not a preprocessing option"},
      {{{"--phase-energy", "20"}}, "--phase-energy: needs --phase"},
      {{{"--phase", "paganin"}, {"--phase-energy", "20"}},
       "--phase: needs --phase-distance, --delta-beta"},
      {{{"phase", "paganin"}}, "phase: needs phase_energy, phase_distance, delta_beta"},
      {{{"--phase", "tie"}}, "--phase: unknown method 'tie'"},
      {{{"--beam-hardening", "0,1,x"}}, "--beam-hardening: expected a number (got 'x')"},
      {{{"--beam-hardening", ""}}, "--beam-hardening: expected a number (got '')"},
  };
  for (const auto& c : cases)
    testing::expect_usage_error_naming([&] { (void)parse_preprocess_options(c.first); }, c.second);
}

TEST(PreprocessOptions, PhaseAndBeamHardeningReadBack) {
  const preprocess_options o =
      parse_preprocess_options(settings{{"--phase", "generalized"},
                                        {"--phase-energy", "25"},
                                        {"--phase-distance", "300"},
                                        {"--delta-beta", "250"},
                                        {"--beam-hardening", "0,1.05,-0.02"}});
  ASSERT_TRUE(o.phase && o.beam_hardening);
  EXPECT_EQ(o.phase->method, phase_method::generalized);
  EXPECT_EQ(o.phase->energy_kev, 25);
  EXPECT_EQ(o.phase->distance_mm, 300);
  EXPECT_EQ(o.phase->delta_beta, 250);
  EXPECT_EQ(*o.beam_hardening, (std::vector<double>{0, 1.05, -0.02}));
  const settings s = preprocess_settings(o);
  const preprocess_options again = parse_preprocess_options(s);
  EXPECT_EQ(preprocess_settings(again).back().value, "0,1.05,-0.02");
  EXPECT_EQ(*again.beam_hardening, *o.beam_hardening);
  EXPECT_EQ(again.phase->energy_kev, 25);
}

// tomopy's two methods by their short names, each with its own options: --ring-sigma is the
// Fourier damping's width for fw (default 2) and the Gaussian's for filtering (default 3); the
// settings read back; an option of another method is refused naming both.
TEST(PreprocessOptions, FourierWaveletAndTitarenkoOptions) {
  const preprocess_options fw = parse_preprocess_options(settings{{"--rings", "fw"},
                                                                  {"--ring-sigma", "1.5"},
                                                                  {"--ring-level", "4"},
                                                                  {"--ring-wavelet", "db3"}});
  ASSERT_TRUE(fw.rings);
  EXPECT_EQ(fw.rings->method, stripe_method::fourier_wavelet);
  EXPECT_EQ(fw.rings->fw_sigma, 1.5);
  EXPECT_EQ(fw.rings->sigma, stripe_options{}.sigma);
  EXPECT_EQ(fw.rings->level, 4);
  EXPECT_EQ(fw.rings->wname, "db3");
  const preprocess_options again = parse_preprocess_options(preprocess_settings(fw));
  EXPECT_EQ(again.rings->fw_sigma, 1.5);
  EXPECT_EQ(again.rings->wname, "db3");
  const preprocess_options ti = parse_preprocess_options(
      settings{{"rings", "ti"}, {"ring_alpha", "2"}, {"ring_blocks", "3"}});
  EXPECT_EQ(ti.rings->method, stripe_method::titarenko);
  EXPECT_EQ(ti.rings->alpha, 2);
  EXPECT_EQ(ti.rings->nblock, 3);
  EXPECT_EQ(parse_preprocess_options(preprocess_settings(ti)).rings->nblock, 3);
  using testing::expect_usage_error_naming;
  const auto parse = [](settings s) { return [s] { (void)parse_preprocess_options(s); }; };
  expect_usage_error_naming(parse({{"--rings", "fw"}, {"--ring-alpha", "2"}}),
                            "--ring-alpha: applies to --rings titarenko only");
  expect_usage_error_naming(parse({{"--rings", "ti"}, {"--ring-size", "5"}}), "--ring-size");
  expect_usage_error_naming(parse({{"--rings", "fw"}, {"--ring-wavelet", "sym4"}}),
                            "--ring-wavelet: unknown wavelet 'sym4'");
  expect_usage_error_naming(parse({{"--rings", "fw"}, {"--ring-level", "31"}}), "--ring-level");
}

// Phase retrieval in the pipeline filters in the sample's plane: on a cone beam of
// magnification 2 it is retrieve_phase with half the pitch and half the distance; the
// pitch must come from a geometry first.
TEST(Preprocess, PhaseRetrievalUsesTheDetectorInTheSamplePlane) {
  preprocess_options o = parse_preprocess_options(settings{{"phase", "paganin"},
                                                           {"phase_energy", "20"},
                                                           {"phase_distance", "400"},
                                                           {"delta_beta", "300"}});
  projection_stack p(3, 9, 11);
  for (std::int64_t i = 0; i < p.size(); ++i)
    p.data[i] = 0.5f + 0.4f * static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  projection_stack unset = p;
  testing::expect_usage_error_naming([&] { (void)preprocess(unset, o); }, "detector pitch");
  const geometry g = make_cone_geometry(11, 9, 0.1, 0.2, 500, 1000, {0.0, 1.0, 2.0});
  set_detector(o, g);
  EXPECT_EQ(o.magnification, 2);
  projection_stack via_pipeline = p;
  (void)preprocess(via_pipeline, o);
  phase_options direct = *o.phase;
  direct.pixel_u_mm = 0.05;
  direct.pixel_v_mm = 0.1;
  direct.pixel_size_mm = 0.05;
  direct.distance_mm = 200;
  projection_stack expected = p;
  retrieve_phase(expected, direct);
  EXPECT_EQ(via_pipeline.data, expected.data);
  // The unscaled filter differs (the control that the scaling is tested).
  direct.distance_mm = 400;
  projection_stack unscaled = p;
  retrieve_phase(unscaled, direct);
  EXPECT_NE(unscaled.data, expected.data);
  // The margin is the zinger window's plus the phase kernel's reach, in the sample's plane.
  direct.distance_mm = 200;
  EXPECT_EQ(preprocess_row_margin(o), phase_row_margin(direct, k_phase_band_tolerance));
}

// preprocess() is the steps one after the other, in the documented order.
TEST(Preprocess, IsZingersThenRings) {
  const projection_stack raw = testing::dirty_scan(40, 5, 33);
  const preprocess_options o = parse_preprocess_options(
      settings{{"rings", "sorting"}, {"ring_size", "5"}, {"zingers", "1"}});
  projection_stack together = raw;
  const preprocess_report done = preprocess(together, o);
  projection_stack apart = raw;
  EXPECT_EQ(remove_outliers(apart, *o.zingers), done.zingers_replaced);
  EXPECT_GT(done.zingers_replaced, 0);
  remove_stripes(apart, *o.rings);
  EXPECT_EQ(together.data, apart.data);
  // The other order differs (the zingers enter the stripe filter's medians): the order matters,
  // so the comparison above can tell.
  projection_stack reversed = raw;
  remove_stripes(reversed, *o.rings);
  (void)remove_outliers(reversed, *o.zingers);
  EXPECT_NE(reversed.data, together.data);
}

}  // namespace
}  // namespace ctforge
