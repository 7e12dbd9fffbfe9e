"""Writes examples/quickstart.ipynb from the cells below (edit here, then run this script)."""
import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell("""# ctforge quickstart

Simulate a cone-beam CT scan of the 3D Shepp-Logan phantom, reconstruct it with FDK and with
SIRT, compare both with the truth, then reconstruct a real synchrotron scan from `data/`.

Arrays are numpy `float32`: volumes `[z][y][x]`, projections `[view][row][col]`; distances in
mm, angles in radians. Every call below runs on a CUDA GPU when one is usable
(`backend="auto"`), on the CPU otherwise."""),
    new_code_cell("""import numpy as np
import matplotlib.pyplot as plt
import ctforge

print("ctforge", ctforge.__version__, "- backend:", ctforge.backend_for()[0])"""),
    new_markdown_cell("""## A cone-beam scan

A 96 x 96 detector of 1 mm pixels, source 500 mm from the rotation axis and 1000 mm from the
detector (magnification 2), 120 views over a full circle."""),
    new_code_cell("""geom = ctforge.Geometry.cone(cols=96, rows=96, pixel_size=1.0, sid=500, sdd=1000,
                             angles=np.linspace(0, 2 * np.pi, 120, endpoint=False))
phantom = ctforge.shepp_logan(size_mm=44)
clean = ctforge.project_analytic(phantom, geom)              # exact line integrals
proj = ctforge.add_poisson_noise(clean, i0=1e5, seed=1)      # 1e5 photons per pixel
print(geom, proj.shape, proj.dtype)
plt.figure(figsize=(8, 3))
plt.subplot(1, 2, 1); plt.imshow(proj[0], cmap="gray"); plt.title("view 0")
plt.subplot(1, 2, 2); plt.imshow(proj[:, 48, :], cmap="gray", aspect="auto"); plt.title("sinogram, row 48")
plt.tight_layout()"""),
    new_markdown_cell("## FDK, and the truth on the same grid"),
    new_code_cell("""grid = ctforge.default_grid(geom, shape=(64, 64, 64))      # (nz, ny, nx), 0.75 mm voxels
print(grid)
fdk = ctforge.reconstruct(proj, geom, grid, algorithm="fdk", filter="hann", cutoff=0.8)
truth = ctforge.voxelize(phantom, grid)
print("FDK :", {k: round(v, 4) for k, v in ctforge.compare(fdk, truth, peak=0.1).items()})"""),
    new_markdown_cell("""## SIRT on a sparse scan

30 views only: FDK streaks, SIRT with a non-negativity constraint does better."""),
    new_code_cell("""sparse = ctforge.Geometry.cone(96, 96, 1.0, 500, 1000, angles=30)
proj_sparse = ctforge.add_poisson_noise(ctforge.project_analytic(phantom, sparse), i0=1e5, seed=2)
fdk_sparse = ctforge.reconstruct(proj_sparse, sparse, grid)
sirt = ctforge.reconstruct(proj_sparse, sparse, grid, algorithm="sirt", iterations=20,
                           nonnegative=True)
for name, vol in [("FDK, 30 views ", fdk_sparse), ("SIRT, 30 views", sirt)]:
    m = ctforge.compare(vol, truth, peak=0.1)
    print(f"{name}: MAE {m['mae']:.5f} /mm, PSNR {m['psnr']:.2f} dB")"""),
    new_code_cell("""fig, axes = plt.subplots(1, 4, figsize=(12, 3.2))
for ax, (title, vol) in zip(axes, [("truth", truth), ("FDK, 120 views", fdk),
                                  ("FDK, 30 views", fdk_sparse), ("SIRT, 30 views", sirt)]):
    ax.imshow(vol[32], cmap="gray", vmin=0, vmax=0.04)
    ax.set_title(title); ax.axis("off")
plt.tight_layout()"""),
    new_markdown_cell("""## A real scan

A tooth scanned at a synchrotron (APS; tomopy's test data): 181 parallel-beam projections over
180° in DataExchange layout, raw counts with flat and dark fields. `read_projections` turns
them into line integrals; the rotation axis is estimated from the data."""),
    new_code_cell("""sino, tooth_geom = ctforge.read_projections("../data/dxchange/tooth.h5")
center = ctforge.estimate_center_of_rotation(sino, tooth_geom)
print(sino.shape, tooth_geom.type, f"rotation axis at column {center:.2f}")
tooth = ctforge.reconstruct(sino, tooth_geom.with_center_of_rotation(center))
plt.figure(figsize=(4, 4))
plt.imshow(tooth[0], cmap="gray"); plt.title("tooth, FBP"); plt.axis("off")"""),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
path = pathlib.Path(__file__).with_name("quickstart.ipynb")
nbformat.write(nb, path)
print("wrote", path)
