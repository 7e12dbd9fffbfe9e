// The 2D discrete wavelet transform of wavelet.hpp.
#include "preprocess/wavelet.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::detail {

namespace {

/// Reconstruction low-pass filters of db1 ... db10 (the scaling filters, sum sqrt(2)), computed
/// by Daubechies' construction (Ten Lectures on Wavelets, 1992, section 6.1: spectral
/// factorisation of P(y) = sum_k C(N-1+k, k) y^k, minimum phase) in double precision; they
/// equal PyWavelets' tables to 5e-15.
const std::vector<std::vector<double>> k_daubechies = {
    {0.7071067811865476, 0.7071067811865476},
    {0.48296291314453416, 0.8365163037378079, 0.2241438680420134, -0.1294095225512604},
    {0.3326705529500826, 0.8068915093110924, 0.45987750211849154, -0.13501102001025458,
     -0.08544127388202666, 0.035226291885709526},
    {0.23037781330889642, 0.7148465705529156, 0.6308807679298589, -0.027983769416859487,
     -0.187034811719093, 0.030841381835560643, 0.03288301166688516, -0.010597401785069018},
    {0.16010239797419304, 0.60382926979719, 0.7243085284377734, 0.13842814590132074,
     -0.2422948870663824, -0.03224486958463851, 0.07757149384004576, -0.006241490212798279,
     -0.012580751999082002, 0.0033357252854737756},
    {0.1115407433501094, 0.4946238903984527, 0.7511339080210953, 0.3152503517091977,
     -0.22626469396543947, -0.12976686756726172, 0.09750160558732286, 0.027522865530305706,
     -0.03158203931748601, 0.0005538422011614997, 0.004777257510945506, -0.0010773010853084792},
    {0.07785205408500923, 0.3965393194819175, 0.7291320908462355, 0.4697822874051932,
     -0.14390600392856565, -0.22403618499387476, 0.07130921926683031, 0.08061260915108312,
     -0.03802993693501444, -0.01657454163066693, 0.012550998556099875, 0.0004295779729213627,
     -0.001801640704047493, 0.0003537137999745206},
    {0.054415842243103967, 0.31287159091429984, 0.6756307362972892, 0.5853546836542062,
     -0.015829105256348078, -0.2840155429615466, 0.00047248457391295336, 0.12874742662047872,
     -0.017369301001807804, -0.044088253930794616, 0.013981027917398263, 0.008746094047405747,
     -0.00487035299345156, -0.00039174037337694824, 0.0006754494064505685, -0.00011747678412476936},
    {0.03807794736387832, 0.24383467461259012, 0.604823123690111, 0.6572880780512993,
     0.13319738582500953, -0.29327378327917564, -0.09684078322297503, 0.14854074933810577,
     0.030725681479333078, -0.06763282906132977, 0.0002509471148312941, 0.02236166212367922,
     -0.004723204757751453, -0.004281503682463422, 0.0018476468830562278, 0.0002303857635231955,
     -0.0002519631889427101, 3.934732031627159e-05},
    {0.026670057900555544,  0.1881768000776915,     0.5272011889317257,    0.6884590394536034,
     0.28117234366057714,   -0.24984642432731324,   -0.19594627437737963,  0.12736934033579647,
     0.09305736460356819,   -0.07139414716639432,   -0.029457536821876844, 0.033212674059341155,
     0.0036065535669561936, -0.010733175483330623,  0.001395351747052925,  0.001992405295185052,
     -0.000685856694959711, -0.0001164668551292856, 9.35886703200696e-05,  -1.3264202894521238e-05},
};

}  // namespace

wavelet_filters daubechies(std::string_view wname) {
  int n = 0;
  if (wname == "haar") {
    n = 1;
  } else if (wname.size() > 2 && wname.substr(0, 2) == "db") {
    const auto digits = wname.substr(2);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || end != digits.data() + digits.size()) n = 0;
  }
  CTFORGE_EXPECTS(n >= 1 && n <= static_cast<int>(k_daubechies.size()),
                  fmt::format("stripe wname: a Daubechies wavelet, haar or db1 ... db{} (got '{}')",
                              k_daubechies.size(), wname));
  wavelet_filters w;
  w.rec_lo = k_daubechies[static_cast<std::size_t>(n - 1)];
  const std::size_t taps = w.rec_lo.size();
  w.dec_lo.assign(w.rec_lo.rbegin(), w.rec_lo.rend());
  w.dec_hi.resize(taps);
  for (std::size_t k = 0; k < taps; ++k) w.dec_hi[k] = (k % 2 == 0 ? -1.0 : 1.0) * w.rec_lo[k];
  w.rec_hi.assign(w.dec_hi.rbegin(), w.dec_hi.rend());
  return w;
}

namespace {

/// Index k of a line of n samples extended symmetrically (x[-1] = x[0], x[n] = x[n - 1]),
/// repeatedly for lines shorter than the filter.
std::int64_t symmetric_index(std::int64_t k, std::int64_t n) {
  const std::int64_t period = 2 * n;
  k %= period;
  if (k < 0) k += period;
  return k < n ? k : period - 1 - k;
}

/// One level along a line of n samples x[i * xs]: lo[i * os], hi[i * os] for i < dwt_length.
void dwt_line(const float* x, std::int64_t n, std::int64_t xs, const wavelet_filters& w, float* lo,
              float* hi, std::int64_t os) {
  const std::int64_t taps = w.taps(), m = dwt_length(n, taps);
  for (std::int64_t i = 0; i < m; ++i) {
    double a = 0, d = 0;
    for (std::int64_t j = 0; j < taps; ++j) {
      const double v = x[symmetric_index(2 * i + 1 - j, n) * xs];
      a += w.dec_lo[static_cast<std::size_t>(j)] * v;
      d += w.dec_hi[static_cast<std::size_t>(j)] * v;
    }
    lo[i * os] = static_cast<float>(a);
    hi[i * os] = static_cast<float>(d);
  }
}

/// The inverse along a line: y[o * ys] for o < 2 m - taps + 2 from m coefficients per band.
void idwt_line(const float* lo, const float* hi, std::int64_t m, std::int64_t is,
               const wavelet_filters& w, float* y, std::int64_t ys) {
  const std::int64_t taps = w.taps(), n = 2 * m - taps + 2;
  for (std::int64_t o = 0; o < n; ++o) {
    double s = 0;
    // y[o] = sum_i lo[i] rec_lo[t] + hi[i] rec_hi[t], t = o + taps - 2 - 2 i in [0, taps)
    const std::int64_t first = o / 2;  // t <= taps - 1
    const std::int64_t last = std::min<std::int64_t>(m - 1, (o + taps - 2) / 2);
    for (std::int64_t i = first; i <= last; ++i) {
      const auto t = static_cast<std::size_t>(o + taps - 2 - 2 * i);
      s += w.rec_lo[t] * lo[i * is] + w.rec_hi[t] * hi[i * is];
    }
    y[o * ys] = static_cast<float>(s);
  }
}

}  // namespace

void dwt2(const plane& x, const wavelet_filters& w, plane& a, plane& h, plane& v, plane& d,
          plane& tmp) {
  const std::int64_t mr = dwt_length(x.rows, w.taps()), mc = dwt_length(x.cols, w.taps());
  tmp.resize(2 * mr, x.cols);  // rows [0, mr): low-pass along axis 0, [mr, 2 mr): high-pass
  for (std::int64_t c = 0; c < x.cols; ++c)
    dwt_line(&x.v[static_cast<std::size_t>(c)], x.rows, x.cols, w, &tmp.at(0, c), &tmp.at(mr, c),
             x.cols);
  a.resize(mr, mc), h.resize(mr, mc), v.resize(mr, mc), d.resize(mr, mc);
  for (std::int64_t r = 0; r < mr; ++r) {
    dwt_line(&tmp.at(r, 0), x.cols, 1, w, &a.at(r, 0), &v.at(r, 0), 1);
    dwt_line(&tmp.at(mr + r, 0), x.cols, 1, w, &h.at(r, 0), &d.at(r, 0), 1);
  }
}

void idwt2(const plane& a, const plane& h, const plane& v, const plane& d, const wavelet_filters& w,
           plane& out, plane& tmp) {
  const std::int64_t mr = a.rows, mc = a.cols, taps = w.taps();
  const std::int64_t nr = 2 * mr - taps + 2, nc = 2 * mc - taps + 2;
  tmp.resize(2 * mr, nc);  // along axis 1 first: rows [0, mr) from (a, v), [mr, 2 mr) from (h, d)
  for (std::int64_t r = 0; r < mr; ++r) {
    idwt_line(&a.v[static_cast<std::size_t>(r * mc)], &v.v[static_cast<std::size_t>(r * mc)], mc, 1,
              w, &tmp.at(r, 0), 1);
    idwt_line(&h.v[static_cast<std::size_t>(r * mc)], &d.v[static_cast<std::size_t>(r * mc)], mc, 1,
              w, &tmp.at(mr + r, 0), 1);
  }
  out.resize(nr, nc);
  for (std::int64_t c = 0; c < nc; ++c)
    idwt_line(&tmp.at(0, c), &tmp.at(mr, c), mr, nc, w, &out.at(0, c), nc);
}

}  // namespace ctforge::detail
