// Resumable reconstruction (include/ctforge/checkpoint.hpp; ctforge recon --checkpoint-dir,
// ctforge.reconstruct(checkpoint_dir=...)): FDK / FBP slab by slab, the iterative methods with
// their saved state.
//
// The grid is cut into slabs of whole z-planes (units). Each unit reconstructs from the detector
// rows its slab projects onto (plus interpolation margin), so the ramp filter runs once per row
// band, and is written into DIR atomically: slab_<k0>_<k1>.f32 (the floats, [z][y][x]) and then
// its marker slab_<k0>_<k1>.json (range, run fingerprint, ctforge version, FNV-1a checksum of
// the data). DIR/run.json records what the run is (input file and its size / mtime, geometry,
// grid, options); a rerun with other inputs or options is refused naming the difference. After
// a crash, SIGKILL or a reclaimed instance, the same command skips every unit whose marker and
// data check out and computes the rest; the assembled volume is written like any output and is
// bit-identical to an uninterrupted run of the same command (units are deterministic).
// A cancelled call (opt.cancel: the CLI's SIGINT / SIGTERM handler, Python's Ctrl-C) abandons
// the unit in progress at its next batch of views and throws ctforge::cancelled saying what is
// recorded.
#include "ctforge/checkpoint.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/parallel_copy.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/partitioned.hpp"
#include "math/cylinder.hpp"
#include "math/slab_rows.hpp"
#include "recon/helical.hpp"
#include "recon/iterative/iterative.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Planes [u.k0, u.k1) of vg as a grid of their own.
volume_geometry sub_grid(const volume_geometry& vg, const slab_unit& u) {
  volume_geometry sub = vg;
  sub.nz = u.k1 - u.k0;
  sub.origin_mm[2] = vg.origin_mm[2] + static_cast<double>(u.k0) * vg.spacing_mm[2];
  return sub;
}

std::string hex(std::uint64_t v) {
  return fmt::format("{:016x}", v);
}

// ---- units ----------------------------------------------------------------------------------

/// Detector rows [r0, r1) that planes [k0, k1) of `vg` project onto in any view, with one row
/// of margin beyond the bilinear taps (kernels::slab_row_band over the box of the planes'
/// voxels, their edges included); all rows when a corner is at or behind a source.
std::pair<std::int64_t, std::int64_t> detector_rows_of(const geometry& g, const volume_geometry& vg,
                                                       const std::vector<projection_matrix>& mats,
                                                       std::int64_t k0, std::int64_t k1) {
  if (g.rows == 1) return {0, 1};
  const double hx = 0.5 * vg.spacing_mm[0], hy = 0.5 * vg.spacing_mm[1];
  const kernels::slab_box box{
      {vg.origin_mm[0] - hx, vg.origin_mm[0] + (vg.nx - 0.5) * vg.spacing_mm[0]},
      {vg.origin_mm[1] - hy, vg.origin_mm[1] + (vg.ny - 0.5) * vg.spacing_mm[1]},
      {vg.origin_mm[2] + (k0 - 0.5) * vg.spacing_mm[2],
       vg.origin_mm[2] + (k1 - 0.5) * vg.spacing_mm[2]}};
  const kernels::row_band b =
      kernels::slab_row_band(box, mats.data(), mats.size(), g.rows, /*curved=*/false);
  const std::int64_t r0 = std::min<std::int64_t>(b.r0, g.rows - 1);
  return {r0, std::max<std::int64_t>(b.r1, r0 + 1)};
}

json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

void write_text(const fs::path& p, const std::string& text) {
  io::write_atomically(p.string(), [&](const std::string& tmp) {
    io::write_file_bytes(tmp, text.data(), text.size(), p.string());
  });
}

/// A recorded unit or state slot (<stem>.json + <stem>.f32) of run `run_hash`: its marker and
/// its `count` floats (0: the sum of the marker's "arrays" sizes, a state slot) when both check
/// out; an empty marker with the reason otherwise.
struct recorded {
  json marker;
  std::vector<float> data;
};
recorded read_recorded(const fs::path& dir, const std::string& stem, const std::string& run_hash,
                       std::size_t count, std::string* why) {
  json m = read_json_file(dir / (stem + ".json"));
  if (m.is_null() || !m.is_object()) {
    *why = "no marker";
    return {};
  }
  if (m.value("run", "") != run_hash) {
    *why = "marker of another run";
    return {};
  }
  if (count == 0) {
    const auto it = m.find("arrays");
    bool ok = it != m.end() && it->is_array();
    if (ok)
      for (const auto& n : *it) {
        ok = ok && n.is_number_unsigned();
        if (ok) count += n.get<std::size_t>();
      }
    if (!ok || count == 0 || count > (std::size_t{1} << 40)) {
      *why = "marker without a valid list of arrays";
      return {};
    }
  }
  // A state slot is checked in pieces and read again array by array when resumed (at most one
  // of its arrays in memory); a unit's data is kept.
  const bool keep = !m.contains("arrays");
  std::vector<float> data(keep ? count : std::min<std::size_t>(count, std::size_t{1} << 22));
  std::ifstream in(dir / (stem + ".f32"), std::ios::binary);
  std::uint64_t h = fnv1a(nullptr, 0);
  for (std::size_t at = 0; at < count;) {
    const std::size_t n = std::min(data.size(), count - at);
    if (!in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(n * 4))) break;
    h = fnv1a(data.data(), n * sizeof(float), h);
    at += n;
  }
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    *why = "data file missing or of the wrong size";
    return {};
  }
  if (m.value("checksum", "") != hex(h)) {
    *why = "checksum mismatch (corrupted data)";
    return {};
  }
  if (!keep) data = {};
  return {std::move(m), std::move(data)};
}

std::string describe_difference(const json& there, const json& here) {
  std::string diff;
  for (const auto& [key, value] : here.items()) {
    const auto it = there.find(key);
    const std::string was = it == there.end() ? "absent" : it->dump();
    if (it == there.end() || *it != value)
      diff +=
          fmt::format("{}{} ({} there, {} here)", diff.empty() ? "" : "; ", key, was, value.dump());
  }
  return diff.empty() ? "the run record differs" : diff;
}

void remove_orphaned_temporaries(const fs::path& dir, bool once);

/// Creates co.dir and checks (or writes) its run record; returns the record's hash.
std::string open_run_dir(const checkpoint_options& co, const json& record) {
  const fs::path dir(co.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  CTFORGE_CHECK(fs::is_directory(dir), fmt::format("--checkpoint-dir: cannot create '{}'{}", co.dir,
                                                   ec ? ": " + ec.message() : ""));
  const std::string text = record.dump();
  const std::string run_hash = hex(fnv1a(text.data(), text.size()));
  const fs::path run_file = dir / "run.json";
  const json there = read_json_file(run_file);
  if (!there.is_null()) {
    CTFORGE_EXPECTS(there == record,
                    fmt::format("--checkpoint-dir {}: holds units of another run: {}. Use another "
                                "directory, or empty this one to start over",
                                co.dir, describe_difference(there, record)));
  } else {
    write_text(run_file, record.dump(1) + "\n");
  }
  remove_orphaned_temporaries(dir, /*once=*/true);
  return run_hash;
}

/// Data file + marker of one unit or state slot, the marker last.
void record_unit(const fs::path& dir, const std::string& stem, std::span<const float> data,
                 json marker) {
  const fs::path data_path = dir / (stem + ".f32");
  io::write_atomically(data_path.string(), [&](const std::string& tmp) {
    io::write_file_bytes(tmp, data.data(), data.size() * sizeof(float), data_path.string());
  });
  marker["ctforge"] = CTFORGE_VERSION;
  marker["checksum"] = hex(fnv1a(data.data(), data.size() * sizeof(float)));
  write_text(dir / (stem + ".json"), marker.dump() + "\n");
}

/// Data file + marker of an iterative state slot: the arrays one after the other, read one at a
/// time when the state is read array by array (iterative_state::read), the marker last.
void record_state(const fs::path& dir, const std::string& stem, const iterative_state& st,
                  json marker) {
  const fs::path data_path = dir / (stem + ".f32");
  std::uint64_t h = fnv1a(nullptr, 0);
  std::vector<float> one;
  io::write_atomically(data_path.string(), [&](const std::string& tmp) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    const auto fail = [&] {
      throw error(fmt::format("{}: cannot write the saved state ({})", data_path.string(),
                              std::strerror(errno)));
    };
    if (!f) fail();
    for (std::size_t k = 0; k < st.array_count(); ++k) {
      std::span<const float> a;
      if (st.read) {
        one.resize(st.array_size(k));
        st.read(k, one);
        a = one;
      } else {
        a = st.arrays[k];
      }
      h = fnv1a(a.data(), a.size_bytes(), h);
      if (std::fwrite(a.data(), sizeof(float), a.size(), f.get()) != a.size()) fail();
    }
    one = {};
    if (std::fflush(f.get()) != 0) fail();
    if (std::fclose(f.release()) != 0) fail();
  });
  marker["ctforge"] = CTFORGE_VERSION;
  marker["checksum"] = hex(h);
  write_text(dir / (stem + ".json"), marker.dump() + "\n");
}

[[noreturn]] void throw_stopped(const std::string& what_is_kept) {
  throw checkpoint_stopped(what_is_kept);
}

constexpr algorithm k_iterative[] = {algorithm::sirt, algorithm::os_sart, algorithm::cgls,
                                     algorithm::fista_tv, algorithm::osem};

/// The stem of an iterative method's state slots: sirt, os_sart, cgls, fista_tv, osem.
std::string state_stem(algorithm a) {
  std::string s = to_string(a);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

/// Removes the temporaries of this directory's files that writers killed before they renamed
/// them left (SIGKILL, an out-of-memory kill, a lost node: no handler ran): those of this
/// machine's processes that are gone, and any older than ten minutes (a writer keeps its
/// temporary for the seconds between writing and renaming it). `once`: only the first time this
/// process opens the directory (a distributed worker opens it for every unit it computes).
void remove_orphaned_temporaries(const fs::path& dir, bool once) {
  std::vector<std::string> prefixes = {"slab_", "run.", "assembled."};
  for (algorithm a : k_iterative) prefixes.push_back(state_stem(a) + "_");
  if (once)
    io::remove_orphaned_temporaries_once(dir.string(), prefixes, 600);
  else
    io::remove_orphaned_temporaries(dir.string(), prefixes, 600);
}

/// The figures of the iterations so far as rows [iteration, residual, objective,
/// relative_update, seconds, stop_criterion] (JSON has no infinity: an OSEM objective of +inf
/// is written null).
json log_to_json(const std::vector<iteration_info>& log) {
  json rows = json::array();
  for (const iteration_info& i : log)
    rows.push_back({i.iteration, i.residual,
                    std::isfinite(i.objective) ? json(i.objective) : json(nullptr),
                    i.relative_update, i.seconds, i.stop_criterion});
  return rows;
}

/// log_to_json's rows back; empty (no log) when they are malformed.
std::vector<iteration_info> log_from_json(const json& rows) {
  std::vector<iteration_info> log;
  if (!rows.is_array()) return log;
  for (const json& r : rows) {
    if (!r.is_array() || r.size() != 6 || !r[0].is_number_integer() || !r[1].is_number() ||
        !(r[2].is_number() || r[2].is_null()) || !r[3].is_number() || !r[4].is_number() ||
        !r[5].is_number())
      return {};
    iteration_info i;
    i.iteration = r[0].get<int>();
    i.residual = r[1].get<double>();
    i.objective = r[2].is_null() ? std::numeric_limits<double>::infinity() : r[2].get<double>();
    i.relative_update = r[3].get<double>();
    i.seconds = r[4].get<double>();
    i.stop_criterion = r[5].get<double>();
    log.push_back(i);
  }
  return log;
}

/// An iterative method with its state (iterative_state) saved into two alternating slots of
/// co.dir (<method>_0, <method>_1: the arrays one after the other in .f32, their sizes, the
/// scalars and the iteration count in the marker), so that a crash while one is written leaves
/// the other; resumes from the valid one with the most iterations.
volume iterative_checkpointed(const std::function<volume(const recon_options&)>& run,
                              recon_options ro,
                              const checkpoint_options& co, json record,
                              const std::function<void(const std::string&)>& note) {
  // Not the iteration count: a run may be continued to more iterations. What the iterations do:
  record.erase("filter");
  record.erase("cutoff");
  record["ctforge"] = CTFORGE_VERSION;
  record["relaxation"] = ro.relaxation;
  record["nonnegative"] = ro.nonnegative;
  const bool matched = detail::backprojector_for(ro) == detail::backprojector_kind::matched;
  record["backprojector"] = matched ? "matched" : "voxel";
  if (ro.algo == algorithm::os_sart || ro.algo == algorithm::osem) record["subsets"] = ro.subsets;
  if (ro.algo == algorithm::fista_tv) {
    record["tv_weight"] = ro.tv_weight;
    record["tv_iterations"] = ro.tv_iterations;
  }
  // The start: a run resumed with the same --initial continues its state (another is refused).
  if (!ro.initial.empty())
    record["initial"] = hex(fnv1a(ro.initial.data(), ro.initial.size() * sizeof(float)));
  const std::string run_hash = open_run_dir(co, record);
  const fs::path dir(co.dir);
  const std::string stem = state_stem(ro.algo);
  const char* name = detail::display_name(ro.algo);
  const int threads = detail::resolve_threads(ro.threads);
  int best_slot = -1, best_iterations = 0, beyond = 0;
  recorded best;
  for (int slot = 0; slot < 2; ++slot) {
    const std::string slot_stem = fmt::format("{}_{}", stem, slot);
    std::string why;
    recorded r = read_recorded(dir, slot_stem, run_hash, 0, &why);
    if (r.marker.is_null()) {
      if (why != "no marker" && why != "marker of another run")
        note(fmt::format("note: {}: {}; not used", slot_stem, why));
      continue;
    }
    const int iterations = r.marker.value("iterations", 0);
    const json scalars = r.marker.value("scalars", json::array());
    const bool scalars_ok =
        scalars.is_array() &&
        std::all_of(scalars.begin(), scalars.end(), [](const json& v) { return v.is_number(); });
    if (!scalars_ok) {
      note(fmt::format("note: {}: marker without valid scalars; not used", slot_stem));
      continue;
    }
    // A state beyond the iterations asked for is refused below: not silently restarted over.
    beyond = std::max(beyond, iterations > ro.iterations ? iterations : 0);
    if (iterations <= best_iterations || iterations > ro.iterations) continue;
    best_slot = slot;
    best_iterations = iterations;
    best = std::move(r);
  }
  if (beyond > 0)
    throw usage_error(fmt::format(
        "--iterations: {} holds the {} state after {} iterations, more than the {} asked for; "
        "ask for at least {} to continue it, or use another --checkpoint-dir",
        co.dir, name, beyond, ro.iterations, beyond));
  if (best_slot >= 0) {
    note(fmt::format("resuming {} after iteration {} of {} from {}", name, best_iterations,
                     ro.iterations, co.dir));
    const int saved_threads = best.marker.value("threads", threads);
    if (saved_threads != threads && matched)
      note(
          fmt::format("note: the state was saved by a run of {} threads and this one has {}: "
                      "the matched back-projector's sums depend on the thread count, so the "
                      "result equals an uninterrupted run's up to rounding (--threads {} "
                      "continues bit for bit)",
                      saved_threads, threads, saved_threads));
    iterative_state& st = ro.checkpoint.resume;
    st.iterations = best_iterations;
    ro.initial = {};  // the state continues from where --initial started it
    // Read array by array from the slot when the method asks (this run writes the other slot).
    std::vector<std::size_t> offsets;
    std::size_t offset = 0;
    for (const auto& n : best.marker["arrays"]) {
      st.sizes.push_back(n.get<std::size_t>());
      offsets.push_back(offset);
      offset += st.sizes.back();
    }
    // The arrays are checked again as they are read, in order: after the last one, the
    // checksum of all of them must be the marker's (the slot checked out above).
    const fs::path file = dir / fmt::format("{}_{}.f32", stem, best_slot);
    auto running = std::make_shared<std::pair<std::size_t, std::uint64_t>>(0, fnv1a(nullptr, 0));
    st.read = [file, offsets, sizes = st.sizes, running,
               checksum = best.marker.value("checksum", "")](std::size_t k, std::span<float> out) {
      const std::string changed =
          fmt::format("{}: the saved state changed since it was checked", file.string());
      std::ifstream in(file, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(offsets.at(k) * sizeof(float)));
      CTFORGE_CHECK(out.size() == sizes.at(k) &&
                        in.read(reinterpret_cast<char*>(out.data()),
                                static_cast<std::streamsize>(out.size_bytes())),
                    changed);
      auto& [next, h] = *running;
      if (k != next) {  // (read out of order: not checked again)
        next = sizes.size() + 1;
        return;
      }
      h = fnv1a(out.data(), out.size_bytes(), h);
      ++next;
      CTFORGE_CHECK(next < sizes.size() || hex(h) == checksum, changed);
    };
    for (const auto& v : best.marker["scalars"]) st.scalars.push_back(v.get<double>());
    st.log = log_from_json(best.marker.value("log", json::array()));
  }
  int next_slot = best_slot < 0 ? 0 : 1 - best_slot;  // never overwrite the latest state
  int saved_iterations = best_iterations;
  ro.checkpoint.every = co.every_iterations;
  ro.checkpoint.seconds = co.every_seconds;
  ro.checkpoint.save = [&](const iterative_state& st) {
    json sizes = json::array();
    for (std::size_t k = 0; k < st.array_count(); ++k) sizes.push_back(st.array_size(k));
    record_state(dir, fmt::format("{}_{}", stem, next_slot), st,
                 {{"iterations", st.iterations},
                  {"run", run_hash},
                  {"arrays", sizes},
                  {"scalars", st.scalars},
                  {"threads", threads},
                  {"log", log_to_json(st.log)}});
    next_slot = 1 - next_slot;
    saved_iterations = st.iterations;
    if (co.after_unit) co.after_unit(st.iterations);
  };
  try {
    return run(ro);
  } catch (const cancelled&) {
    throw_stopped(fmt::format("the state after {} of {} iterations is kept in {}", saved_iterations,
                              ro.iterations, co.dir));
  }
}

}  // namespace

std::string slab_unit::name() const {
  return fmt::format("slab_{:06d}_{:06d}", k0, k1);
}

std::int64_t default_unit_planes(const volume_geometry& vg) {
  return std::max<std::int64_t>(1,
                                (std::int64_t{1} << 24) / std::max<std::int64_t>(1, vg.nx * vg.ny));
}

band_source bands_from_rows(row_band_source rows) {
  return [rows = std::move(rows)](const slab_unit& u) {
    projection_stack all = rows(u.r0, u.r1);
    if (u.v0 == 0 && u.v1 == all.views) return all;
    CTFORGE_CHECK(u.v1 <= all.views, fmt::format("{}: views {}..{} of a band of {} views", u.name(),
                                                 u.v0, u.v1 - 1, all.views));
    projection_stack band(u.v1 - u.v0, all.rows, all.cols);
    std::copy(all.data.begin() + u.v0 * all.rows * all.cols,
              all.data.begin() + u.v1 * all.rows * all.cols, band.data.begin());
    return band;
  };
}

std::vector<slab_unit> plan_slab_units(const geometry& g, const volume_geometry& vg,
                                       std::int64_t planes) {
  CTFORGE_EXPECTS(planes >= 0, fmt::format("planes per unit: must be >= 0 (got {})", planes));

  if (planes == 0) planes = default_unit_planes(vg);
  planes = std::min(planes, vg.nz);
  // Flat detectors: the rows through the projection matrices (row_band); cylindrical ones:
  // the rows of the CUDA back-projector's slabs, from the per-view cylinder maps.
  const std::vector<projection_matrix> mats =
      g.curved() ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  const std::vector<kernels::cyl_map_d> maps =
      g.curved() ? kernels::cylinder_maps_d(g) : std::vector<kernels::cyl_map_d>{};
  std::vector<slab_unit> units;
  for (std::int64_t k0 = 0; k0 < vg.nz; k0 += planes) {
    slab_unit u;
    u.k0 = k0;
    u.k1 = std::min(vg.nz, k0 + planes);
    u.v1 = g.view_count();
    if (g.helix) {
      // Helical FBP weighs each ray by its row's place on the whole detector: every row, of
      // the views whose rays reach the unit's planes.
      u.r0 = 0;
      u.r1 = g.rows;
      std::tie(u.v0, u.v1) = detail::helical_unit_views(g, sub_grid(vg, u));
    } else if (g.curved()) {
      const kernels::row_band b = kernels::slab_row_band(
          kernels::slab_centres(vg.origin_mm, vg.spacing_mm, vg.nx, vg.ny, u.k0, u.k1 - u.k0),
          maps.data(), maps.size(), g.rows, /*curved=*/true,
          0.5 * std::min(std::abs(vg.spacing_mm[0]), std::abs(vg.spacing_mm[1])));
      u.r0 = std::min<std::int64_t>(b.r0, g.rows - 1);
      u.r1 = std::max<std::int64_t>(b.r1, u.r0 + 1);
    } else {
      std::tie(u.r0, u.r1) = detector_rows_of(g, vg, mats, u.k0, u.k1);
    }
    units.push_back(u);
  }
  return units;
}

volume reconstruct_unit(const projection_view& band, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const slab_unit& u) {
  require_host(band, "a slab unit");
  CTFORGE_EXPECTS(
      0 <= u.k0 && u.k0 < u.k1 && u.k1 <= vg.nz && 0 <= u.r0 && u.r0 < u.r1 && u.r1 <= g.rows,
      fmt::format("{}: planes [{}, {}) / rows [{}, {}) outside the {}-plane grid / "
                  "{}-row detector",
                  u.name(), u.k0, u.k1, u.r0, u.r1, vg.nz, g.rows));
  CTFORGE_EXPECTS(
      0 <= u.v0 && u.v0 < u.v1 && u.v1 <= g.view_count(),
      fmt::format("{}: views [{}, {}) outside the {} views", u.name(), u.v0, u.v1, g.view_count()));
  CTFORGE_EXPECTS(band.views == u.v1 - u.v0 && band.rows == u.r1 - u.r0 && band.cols == g.cols,
                  fmt::format("{}: the band holds [{}][{}][{}] projections, the unit needs "
                              "[{}][{}][{}] (views {}..{}, rows {}..{}, cols)",
                              u.name(), band.views, band.rows, band.cols, u.v1 - u.v0, u.r1 - u.r0,
                              g.cols, u.v0, u.v1 - 1, u.r0, u.r1 - 1));
  io::detector_selection sel;
  sel.rows = {u.r0, u.r1 - u.r0};
  sel.views = {u.v0, u.v1 - u.v0};
  const geometry gb = io::select_geometry(g, sel, 1, 1);
  return reconstruct(band, gb, sub_grid(vg, u), opt);
}

slab_run::slab_run(const geometry& g, const volume_geometry& vg, const checkpoint_options& co,
                   std::string_view run_record_json)
    : g_(g), vg_(vg), dir_(co.dir) {
  CTFORGE_EXPECTS(!co.dir.empty(), "checkpoint directory: empty path");
  json record = json::parse(run_record_json, nullptr, /*allow_exceptions=*/false);
  CTFORGE_EXPECTS(record.is_object(), "checkpoint run record: not a JSON object");
  units_ = plan_slab_units(g, vg, co.planes_per_unit);
  record["ctforge"] = CTFORGE_VERSION;
  record["planes_per_unit"] = units_.front().k1 - units_.front().k0;
  hash_ = open_run_dir(co, record);
}

namespace {

/// Unit i of `run` as recorded, or an empty marker and the reason.
recorded read_unit_files(const fs::path& dir, const slab_unit& u, const volume_geometry& vg,
                         const std::string& hash, std::string* why) {
  recorded r = read_recorded(dir, u.name(), hash,
                             static_cast<std::size_t>((u.k1 - u.k0) * vg.nx * vg.ny), why);
  if (!r.marker.is_null() &&
      (r.marker.value("k0", -1) != u.k0 || r.marker.value("k1", -1) != u.k1)) {
    *why = "marker of another run";
    r.marker = nullptr;
  }
  return r;
}

/// How many of `units` have a marker of run `hash` in `dir` (the data is checked when read).
std::int64_t count_marked(const fs::path& dir, const std::vector<slab_unit>& units,
                          const std::string& hash) {
  std::int64_t marked = 0;
  for (const auto& u : units) {
    const json m = read_json_file(dir / (u.name() + ".json"));
    marked += m.is_object() && m.value("run", "") == hash;
  }
  return marked;
}

}  // namespace

bool slab_run::is_recorded(std::size_t i, std::string* why) const {
  std::string reason;
  const bool ok = !read_unit_files(dir_, units_.at(i), vg_, hash_, &reason).marker.is_null();
  if (why) *why = ok ? "" : reason;
  return ok;
}

std::vector<float> slab_run::read_unit(std::size_t i) const {
  std::string why;
  recorded r = read_unit_files(dir_, units_.at(i), vg_, hash_, &why);
  CTFORGE_CHECK(!r.marker.is_null(),
                fmt::format("{}: unit {} cannot be used: {}", dir_, units_[i].name(), why));
  return std::move(r.data);
}

void slab_run::compute_unit(std::size_t i, const projection_view& band,
                            const recon_options& opt) const {
  const slab_unit& u = units_.at(i);
  const volume slab = reconstruct_unit(band, g_, vg_, opt, u);
  record_unit(dir_, u.name(), slab.data,
              {{"k0", u.k0},
               {"k1", u.k1},
               {"rows", {u.r0, u.r1}},
               {"views", {u.v0, u.v1}},
               {"run", hash_}});
}

void reconstruct_slabwise(const band_source& bands, const geometry& g, const volume_geometry& vg,
                          recon_options ro, std::int64_t planes, const checkpoint_options& co_in,
                          std::string_view run_record_json, const slab_sink& sink,
                          const std::function<void(const std::string&)>& note_fn) {
  const auto note = [&](const std::string& t) {
    if (note_fn) note_fn(t);
  };
  checkpoint_options co = co_in;
  co.planes_per_unit = planes;
  std::optional<slab_run> run;
  if (!co.dir.empty()) run.emplace(g, vg, co, run_record_json);
  const std::vector<slab_unit> units = run ? run->units() : plan_slab_units(g, vg, planes);
  const fs::path dir(co.dir);
  // Recorded units (their markers) first, for the resume note; the data is checked as it is used.
  if (run) {
    const std::int64_t marked = count_marked(dir, units, run->fingerprint());
    if (marked > 0)
      note(
          fmt::format("resuming: {} of {} units in {} are recorded", marked, units.size(), co.dir));
  }
  const auto user_progress = ro.progress;
  const auto n_units = static_cast<double>(units.size());
  std::int64_t done = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const slab_unit& u = units[i];
    // Also between recorded units: assembling a large volume from them takes longer than the
    // notice of a reclaimed instance.
    if (ro.cancel.requested()) break;
    if (run) {
      std::string why;
      recorded r = read_unit_files(dir, u, vg, run->fingerprint(), &why);
      if (!r.marker.is_null()) {
        sink(u, r.data);
        if (co.after_unit) co.after_unit(++done);
        continue;
      }
      if (why != "no marker") note(fmt::format("note: {}: {}; computing it again", u.name(), why));
    }
    if (user_progress) {
      const double base = static_cast<double>(i) / n_units;
      ro.progress = [&, base](double f) { user_progress(base + f / n_units); };
    }
    const projection_stack band = bands(u);
    volume slab;
    try {
      slab = reconstruct_unit(band, g, vg, ro, u);
    } catch (const cancelled&) {
      break;
    }
    if (run)
      record_unit(dir, u.name(), slab.data,
                  {{"k0", u.k0},
                   {"k1", u.k1},
                   {"rows", {u.r0, u.r1}},
                   {"views", {u.v0, u.v1}},
                   {"run", run->fingerprint()}});
    sink(u, slab.data);
    if (co.after_unit) co.after_unit(++done);
  }
  if (ro.cancel.requested() && done < static_cast<std::int64_t>(units.size())) {
    if (run)
      throw_stopped(fmt::format("{} of {} units complete in {}",
                                count_marked(dir, units, run->fingerprint()), units.size(),
                                co.dir));
    throw cancelled("reconstruction cancelled");
  }
}

share_status compute_unit_share(const band_source& bands, const geometry& g,
                                const volume_geometry& vg, recon_options ro, std::int64_t planes,
                                const checkpoint_options& co_in, std::string_view run_record_json,
                                unit_share share,
                                const std::function<void(const std::string&)>& note_fn) {
  const auto note = [&](const std::string& t) {
    if (note_fn) note_fn(t);
  };
  CTFORGE_EXPECTS(share.count >= 1 && 0 <= share.index && share.index < share.count,
                  fmt::format("unit share {}/{}: expected 0 <= K < N", share.index, share.count));
  CTFORGE_EXPECTS(!co_in.dir.empty(), "unit share: needs a checkpoint directory");
  checkpoint_options co = co_in;
  co.planes_per_unit = planes;
  const slab_run run(g, vg, co, run_record_json);
  const std::vector<slab_unit>& units = run.units();
  const std::string name = fmt::format("share {}/{}", share.index, share.count);
  // The share's units that are not recorded yet (a corrupted one is computed again).
  std::vector<std::size_t> mine, missing;
  for (auto i = static_cast<std::size_t>(share.index); i < units.size();
       i += static_cast<std::size_t>(share.count)) {
    mine.push_back(i);
    std::string why;
    if (run.is_recorded(i, &why)) continue;
    if (why != "no marker")
      note(fmt::format("note: {}: {}; computing it again", units[i].name(), why));
    missing.push_back(i);
  }
  note(fmt::format("{}: {} of the {} units; {} recorded already, computing {}", name, mine.size(),
                   units.size(), mine.size() - missing.size(), missing.size()));
  share_status st;
  st.total = static_cast<std::int64_t>(units.size());
  const auto user_progress = ro.progress;
  const auto n_missing = static_cast<double>(missing.size());
  for (std::size_t k = 0; k < missing.size() && !ro.cancel.requested(); ++k) {
    if (user_progress) {
      const double base = static_cast<double>(k) / n_missing;
      ro.progress = [&, base](double f) { user_progress(base + f / n_missing); };
    }
    const projection_stack band = bands(units[missing[k]]);
    try {
      run.compute_unit(missing[k], band, ro);
    } catch (const cancelled&) {
      break;
    }
    ++st.computed;
    if (co.after_unit)
      co.after_unit(static_cast<std::int64_t>(mine.size() - missing.size()) + st.computed);
  }
  if (st.computed < static_cast<std::int64_t>(missing.size()))
    throw_stopped(fmt::format("{} of the {} units of {} complete in {}",
                              static_cast<std::int64_t>(mine.size() - missing.size()) + st.computed,
                              mine.size(), name, co.dir));
  st.recorded = count_marked(co.dir, units, run.fingerprint());
  return st;
}

volume reconstruct_resumable(const projection_view& proj, const geometry& g,
                             const volume_geometry& vg, recon_options ro,
                             const checkpoint_options& co, std::string_view run_record_json,
                             const std::function<void(const std::string&)>& note_fn) {
  CTFORGE_EXPECTS(!co.dir.empty(), "checkpoint directory: empty path");
  require_host(proj, "a resumable reconstruction");
  const json run_record = json::parse(run_record_json, nullptr, /*allow_exceptions=*/false);
  CTFORGE_EXPECTS(run_record.is_object(), "checkpoint run record: not a JSON object");
  const auto note = [&](const std::string& t) {
    if (note_fn) note_fn(t);
  };
  if (is_iterative(ro.algo))
    return iterative_checkpointed(
        [&](const recon_options& o) { return reconstruct(proj, g, vg, o); }, ro, co, run_record,
        note);
  // Each unit's rows of the detector, copied out of the caller's projections.
  const band_source rows = [&](const slab_unit& u) {
    projection_stack band(u.v1 - u.v0, u.r1 - u.r0, proj.cols);
    for (std::int64_t v = u.v0; v < u.v1; ++v)
      std::copy_n(proj.view(v) + u.r0 * proj.cols, (u.r1 - u.r0) * proj.cols, band.view(v - u.v0));
    return band;
  };
  volume out(vg);
  const std::int64_t plane = vg.nx * vg.ny;
  reconstruct_slabwise(
      rows, g, vg, ro, co.planes_per_unit, co, run_record_json,
      [&](const slab_unit& u, std::span<const float> planes) {
        std::copy(planes.begin(), planes.end(), out.data.begin() + u.k0 * plane);
      },
      note_fn);
  return out;
}

void remove_checkpoint(const checkpoint_options& co) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(co.dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours =
        name.starts_with("slab_") ||
        std::any_of(std::begin(k_iterative), std::end(k_iterative), [&](algorithm a) {
          return name.starts_with(state_stem(a) + "_0.") || name.starts_with(state_stem(a) + "_1.");
        });
    if ((ours && (name.ends_with(".f32") || name.ends_with(".json"))) || name == "run.json")
      fs::remove(e.path(), ec);
  }
  remove_orphaned_temporaries(co.dir, /*once=*/false);
}

}  // namespace ctforge

namespace ctforge {

volume reconstruct_partitioned_resumable(view_parts& parts, const geometry& g,
                                         const volume_geometry& vg, recon_options ro,
                                         const checkpoint_options& co,
                                         std::string_view run_record_json,
                                         const std::function<void(const std::string&)>& note_fn) {
  CTFORGE_EXPECTS(!co.dir.empty(), "checkpoint directory: empty path");
  CTFORGE_EXPECTS(is_iterative(ro.algo),
                  fmt::format("--algorithm {}: a run over view partitions is for the iterative "
                              "methods",
                              to_string(ro.algo)));
  const json run_record = json::parse(run_record_json, nullptr, /*allow_exceptions=*/false);
  CTFORGE_EXPECTS(run_record.is_object(), "checkpoint run record: not a JSON object");
  const auto note = [&](const std::string& t) {
    if (note_fn) note_fn(t);
  };
  return iterative_checkpointed(
      [&](const recon_options& o) { return reconstruct_partitioned(parts, g, vg, o); }, ro, co,
      run_record, note);
}

}  // namespace ctforge
