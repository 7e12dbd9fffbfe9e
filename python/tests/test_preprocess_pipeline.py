"""The cleaning steps as read options: read_projections(..., zingers=, rings=, phase=, ...)
applies the library's steps in order after normalisation, a band equals those rows of the
whole cleaned read, the names are the command line's (one table), bad values are usage errors
naming the option, and a distributed run cleans each unit as the one-process run does."""
import numpy as np
import pytest

import ctforge


@pytest.fixture(scope="module")
def dirty(tmp_path_factory):
    """A cone-beam Shepp-Logan scan with zingers (+3 at every 97th value) and a stripe
    (+0.3 on column 20): 60 views of 40 rows x 48 columns."""
    d = tmp_path_factory.mktemp("steps")
    g = ctforge.Geometry.cone(cols=48, rows=40, pixel_size=1.0, sid=200, sdd=400, angles=60)
    p = ctforge.project_analytic(ctforge.shepp_logan(40), g)
    p.reshape(-1)[::97] += 3.0
    p[:, :, 20] += 0.3
    path = d / "dirty.h5"
    ctforge.write_projections(path, p, g)
    return path, p, g


def test_the_table_is_the_command_lines():
    names = {e["name"]: e for e in ctforge.preprocess_options()}
    for name in ("zingers", "zinger_size", "zinger_views", "rings", "ring_size", "phase",
                 "phase_energy", "phase_distance", "delta_beta", "beam_hardening"):
        assert name in names
        assert names[name]["flag"] == "--" + name.replace("_", "-") or name.startswith("delta")
    assert names["ring_size"]["step"] == "rings" and names["zingers"]["step"] == ""


def test_steps_equal_the_library_functions_in_order(dirty):
    """zingers then rings then beam hardening: the functions applied one after the other to
    the plain read, bit for bit (the same code on the same floats)."""
    path, _, _ = dirty
    plain, _ = ctforge.read_projections(path)
    cleaned, _ = ctforge.read_projections(path, zingers=1.0, zinger_size=3, rings="sorting",
                                          ring_size=5, beam_hardening=[0, 1, 0.25])
    expected = ctforge.remove_zingers(plain, threshold=1.0, size=3)
    expected = ctforge.remove_stripes(expected, method="sorting", size=5)
    expected = ctforge.correct_beam_hardening(expected, [0, 1, 0.25])
    np.testing.assert_array_equal(cleaned, expected)
    # Negative control: the other order gives another result.
    other = ctforge.remove_stripes(plain, method="sorting", size=5)
    other = ctforge.correct_beam_hardening(ctforge.remove_zingers(other, threshold=1.0, size=3),
                                           [0, 1, 0.25])
    assert not np.array_equal(cleaned, other)


def test_phase_retrieval_uses_the_sample_plane(dirty):
    """Cone beam with magnification 2: the detector's 1 mm pitch and 300 mm distance become
    0.5 mm and 150 mm in the sample plane."""
    path, _, _ = dirty
    plain, _ = ctforge.read_projections(path)
    got, _ = ctforge.read_projections(path, phase="paganin", phase_energy=20,
                                      phase_distance=300, delta_beta=800)
    expected = ctforge.retrieve_phase(plain, energy_kev=20, distance_mm=150, pixel_size_mm=0.5,
                                      delta_beta=800)
    np.testing.assert_array_equal(got, expected)
    detector_plane = ctforge.retrieve_phase(plain, energy_kev=20, distance_mm=300, pixel_size_mm=1.0,
                                            delta_beta=800)
    assert np.abs(detector_plane - got).max() > 1e-3 * np.abs(got).max()


@pytest.mark.parametrize("band", [(0, 1), (0, 7), (17, 23), (39, 40), (5, 40)])
def test_a_band_equals_the_rows_of_the_whole_cleaned_read(dirty, band):
    path, _, _ = dirty
    steps = {"zingers": 1.0, "zinger_size": 5, "zinger_views": 3, "rings": "all"}
    whole, _ = ctforge.read_projections(path, **steps)
    part, g = ctforge.read_projections(path, band=band, **steps)
    np.testing.assert_array_equal(part, whole[:, band[0]:band[1]])
    assert g.rows == band[1] - band[0]


def test_geometry_reader_takes_the_same_keywords(dirty):
    path, _, g = dirty
    got = ctforge.read_projection_geometry(path, zingers=1.0, rings="all")
    assert got.rows == g.rows and got.cols == g.cols
    with pytest.raises(ctforge.UsageError, match="ring_size"):
        ctforge.read_projection_geometry(path, ring_size=5)


@pytest.mark.parametrize("steps, message", [
    ({"ring_size": 5}, "ring_size: needs rings"),
    ({"rings": "rings"}, "unknown method 'rings'"),
    ({"zingers": 0}, "zingers: must be positive"),
    ({"phase": "paganin", "phase_energy": 20}, "phase: needs"),
    ({"beam_hardening": "0,1,x"}, "beam_hardening"),
])
def test_bad_steps_are_usage_errors_naming_the_option(dirty, steps, message):
    with pytest.raises(ctforge.UsageError, match=message):
        ctforge.read_projections(dirty[0], **steps)


def test_unknown_keyword_is_refused(dirty):
    with pytest.raises((ctforge.UsageError, TypeError), match="zinger"):
        ctforge.read_projections(dirty[0], zinger=1.0)
