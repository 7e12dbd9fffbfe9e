// Resumable reconstruction (include/ctforge/checkpoint.hpp; ctforge recon --checkpoint-dir,
// ctforge.reconstruct(checkpoint_dir=...)): FDK / FBP slab by slab, SIRT with saved iterates.
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
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "ctforge/checkpoint.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex(std::uint64_t v) {
  return fmt::format("{:016x}", v);
}

// ---- units ----------------------------------------------------------------------------------

struct unit {
  std::int64_t k0 = 0, k1 = 0;
  std::string stem() const { return fmt::format("slab_{:06d}_{:06d}", k0, k1); }
};

/// Detector rows [r0, r1) that planes [k0, k1) of `vg` project onto in any view, with one row
/// of margin beyond the bilinear taps; all rows when a corner is at or behind a source.
std::pair<std::int64_t, std::int64_t> row_band(const geometry& g, const volume_geometry& vg,
                                               const std::vector<projection_matrix>& mats,
                                               std::int64_t k0, std::int64_t k1) {
  if (g.rows == 1) return {0, 1};
  double lo = 1e300, hi = -1e300;
  const double hx = 0.5 * vg.spacing_mm[0], hy = 0.5 * vg.spacing_mm[1];
  const double x[2] = {vg.origin_mm[0] - hx, vg.origin_mm[0] + (vg.nx - 0.5) * vg.spacing_mm[0]};
  const double y[2] = {vg.origin_mm[1] - hy, vg.origin_mm[1] + (vg.ny - 0.5) * vg.spacing_mm[1]};
  const double z[2] = {vg.origin_mm[2] + (k0 - 0.5) * vg.spacing_mm[2],
                       vg.origin_mm[2] + (k1 - 0.5) * vg.spacing_mm[2]};
  for (const auto& m : mats)
    for (double px : x)
      for (double py : y)
        for (double pz : z) {
          const double p1 = m[4] * px + m[5] * py + m[6] * pz + m[7];
          const double p2 = m[8] * px + m[9] * py + m[10] * pz + m[11];
          if (!(p2 > 1e-6)) return {0, g.rows};
          lo = std::min(lo, p1 / p2);
          hi = std::max(hi, p1 / p2);
        }
  // The slab's box is convex and the map projective with every corner in front of the source,
  // so the corners bound the rows; bilinear taps reach floor(row) and floor(row) + 1.
  const auto r0 = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(lo)) - 1, 0, g.rows);
  const auto r1 =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(hi)) + 3, r0 + 1, g.rows);
  return {r0, r1};
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
/// its `count` floats when both check out; an empty marker with the reason otherwise.
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
  std::vector<float> data(count);
  std::ifstream in(dir / (stem + ".f32"), std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(count * 4)) ||
      in.peek() != std::char_traits<char>::eof()) {
    *why = "data file missing or of the wrong size";
    return {};
  }
  if (m.value("checksum", "") != hex(fnv1a(data.data(), count * sizeof(float)))) {
    *why = "checksum mismatch (corrupted data)";
    return {};
  }
  return {std::move(m), std::move(data)};
}

std::string describe_difference(const json& there, const json& here) {
  std::string diff;
  for (const auto& [key, value] : here.items()) {
    const auto it = there.find(key);
    const std::string was = it == there.end() ? "absent" : it->dump();
    if (it == there.end() || *it != value)
      diff += fmt::format("{}{} ({} there, {} here)", diff.empty() ? "" : "; ", key, was,
                          value.dump());
  }
  return diff.empty() ? "the run record differs" : diff;
}

/// Creates co.dir and checks (or writes) its run record; returns the record's hash.
std::string open_run_dir(const checkpoint_options& co, const json& record) {
  const fs::path dir(co.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  CTFORGE_CHECK(fs::is_directory(dir), fmt::format("--checkpoint-dir: cannot create '{}'{}",
                                                   co.dir, ec ? ": " + ec.message() : ""));
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

[[noreturn]] void throw_stopped(const std::string& what_is_kept) {
  throw checkpoint_stopped(what_is_kept);
}

/// SIRT with its iterate saved into two alternating slots of co.dir (sirt_0, sirt_1), so that
/// a crash while one is written leaves the other; resumes from the valid one with the most
/// iterations.
volume sirt_checkpointed(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                         recon_options ro, const checkpoint_options& co, json record,
                         const std::function<void(const std::string&)>& note) {
  // Not the iteration count: a run may be continued to more iterations.
  record.erase("filter");
  record.erase("cutoff");
  record["ctforge"] = CTFORGE_VERSION;
  record["relaxation"] = ro.relaxation;
  record["nonnegative"] = ro.nonnegative;
  const std::string run_hash = open_run_dir(co, record);
  const fs::path dir(co.dir);
  const auto count = static_cast<std::size_t>(vg.voxel_count());
  int best_slot = -1, best_iterations = 0;
  std::vector<float> best;
  for (int slot = 0; slot < 2; ++slot) {
    const std::string stem = fmt::format("sirt_{}", slot);
    std::string why;
    recorded r = read_recorded(dir, stem, run_hash, count, &why);
    if (r.marker.is_null()) {
      if (why != "no marker" && why != "marker of another run")
        note(fmt::format("note: {}: {}; not used", stem, why));
      continue;
    }
    const int iterations = r.marker.value("iterations", 0);
    if (iterations <= best_iterations || iterations > ro.iterations) continue;
    best_slot = slot;
    best_iterations = iterations;
    best = std::move(r.data);
  }
  if (best_slot >= 0)
    note(fmt::format("resuming SIRT after iteration {} of {} from {}", best_iterations,
                     ro.iterations, co.dir));
  int next_slot = best_slot < 0 ? 0 : 1 - best_slot;  // never overwrite the latest state
  int saved_iterations = best_iterations;
  ro.sirt_state.resume_iterations = best_iterations;
  ro.sirt_state.resume_x = best;
  ro.sirt_state.every = co.every_iterations;
  ro.sirt_state.seconds = co.every_seconds;
  ro.sirt_state.save = [&](int iterations, std::span<const float> x) {
    record_unit(dir, fmt::format("sirt_{}", next_slot), x,
                {{"iterations", iterations}, {"run", run_hash}});
    next_slot = 1 - next_slot;
    saved_iterations = iterations;
    if (co.after_unit) co.after_unit(iterations);
  };
  try {
    return reconstruct(proj, g, vg, ro);
  } catch (const cancelled&) {
    throw_stopped(fmt::format("the iterate after {} of {} iterations is kept in {}",
                              saved_iterations, ro.iterations, co.dir));
  }
}

}  // namespace

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
  if (ro.algo == algorithm::sirt) return sirt_checkpointed(proj, g, vg, ro, co, run_record, note);
  // Units pick their detector rows through projection matrices (row_band).
  CTFORGE_EXPECTS(!g.curved(),
                  "--checkpoint-dir: resumable FDK / FBP of a cylindrical detector (geometry "
                  "field 'detector.shape') is not supported; run without --checkpoint-dir");
  const fs::path dir(co.dir);
  std::int64_t planes = co.planes_per_unit;
  if (planes <= 0)  // ~16 M voxels (64 MB) per unit, at least one plane
    planes = std::max<std::int64_t>(1, (std::int64_t{1} << 24) / std::max<std::int64_t>(1, vg.nx * vg.ny));
  planes = std::min(planes, vg.nz);
  json record = run_record;
  record["ctforge"] = CTFORGE_VERSION;
  record["planes_per_unit"] = planes;
  const std::string run_hash = open_run_dir(co, record);

  std::vector<unit> units;
  for (std::int64_t k0 = 0; k0 < vg.nz; k0 += planes) units.push_back({k0, std::min(vg.nz, k0 + planes)});
  volume out(vg);
  const std::int64_t plane = vg.nx * vg.ny;
  std::vector<std::size_t> todo;
  std::int64_t reused = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    std::string why;
    recorded r = read_recorded(dir, units[i].stem(), run_hash,
                               static_cast<std::size_t>((units[i].k1 - units[i].k0) * plane), &why);
    if (!r.marker.is_null() &&
        (r.marker.value("k0", -1) != units[i].k0 || r.marker.value("k1", -1) != units[i].k1)) {
      why = "marker of another run";
      r.marker = nullptr;
    }
    if (r.marker.is_null()) {
      if (why != "no marker") note(fmt::format("note: {}: {}; computing it again", units[i].stem(), why));
      todo.push_back(i);
      continue;
    }
    std::copy(r.data.begin(), r.data.end(), out.data.begin() + units[i].k0 * plane);
    ++reused;
  }
  if (reused > 0)
    note(fmt::format("resuming: {} of {} units in {} are complete", reused, units.size(), co.dir));

  const std::vector<projection_matrix> mats = compute_projection_matrices(g);
  const auto user_progress = ro.progress;
  std::int64_t done = reused;
  for (std::size_t n = 0; n < todo.size(); ++n) {
    const unit& u = units[todo[n]];
    if (ro.cancel.requested()) break;
    // This unit's rows of the detector, and its planes of the grid.
    const auto [r0, r1] = row_band(g, vg, mats, u.k0, u.k1);
    projection_stack band(proj.views, r1 - r0, proj.cols);
    for (std::int64_t v = 0; v < proj.views; ++v)
      std::copy_n(proj.view(v) + r0 * proj.cols, (r1 - r0) * proj.cols, band.view(v));
    io::detector_selection sel;
    sel.rows = {r0, r1 - r0};
    const geometry gb = io::select_geometry(g, sel, 1, 1);
    volume_geometry sub = vg;
    sub.nz = u.k1 - u.k0;
    sub.origin_mm[2] = vg.origin_mm[2] + static_cast<double>(u.k0) * vg.spacing_mm[2];
    if (user_progress) {
      const double base = static_cast<double>(n) / static_cast<double>(todo.size());
      ro.progress = [&, base](double f) {
        user_progress(base + f / static_cast<double>(todo.size()));
      };
    }
    volume slab;
    try {
      slab = reconstruct(band, gb, sub, ro);
    } catch (const cancelled&) {
      break;
    }
    record_unit(dir, u.stem(), slab.data, {{"k0", u.k0}, {"k1", u.k1}, {"rows", {r0, r1}},
                                           {"run", run_hash}});
    std::copy(slab.data.begin(), slab.data.end(), out.data.begin() + u.k0 * plane);
    ++done;
    if (co.after_unit) co.after_unit(done);
  }
  if (ro.cancel.requested())
    throw_stopped(fmt::format("{} of {} units complete in {}", done, units.size(), co.dir));
  return out;
}

void remove_checkpoint(const checkpoint_options& co) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(co.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (((name.starts_with("slab_") || name.starts_with("sirt_")) &&
         (name.ends_with(".f32") || name.ends_with(".json"))) ||
        name == "run.json")
      fs::remove(e.path(), ec);
  }
}

}  // namespace ctforge
