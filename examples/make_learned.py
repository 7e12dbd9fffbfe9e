"""Writes examples/learned.ipynb from the cells below (edit here, then run this script)."""
import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell("""# Learned sparse-view reconstruction with ctforge.torch

Train a small *unrolled* network on simulated sparse-view scans on the CPU, in about a minute,
and compare it with FBP, SIRT and CGLS on phantoms it has not seen.

The network runs a few gradient steps on the data term `|A x - y|^2`, each followed by a
small learned correction:

    x_{k+1} = x_k - a_k A^T (A x_k - y) + CNN_k(x_k, A^T (A x_k - y)),    x_0 = FBP(y)

`A` is ctforge's Joseph projector and `A^T` its exact transpose (`ctforge.torch.ForwardProjection`
and its `.adjoint`), both PyTorch autograd operators, so the step sizes `a_k` and the CNNs are
trained end to end through the projector. Volumes are `[batch, z, y, x]` with one slice
(`z = 1`), which is also the `[batch, channel, y, x]` layout of `Conv2d`."""),
    new_code_cell("""import os, time
import numpy as np
import matplotlib.pyplot as plt
import scipy.ndimage
import torch
from torch import nn
import ctforge
import ctforge.torch as ct

THREADS = min(2, os.cpu_count())       # PyTorch and ctforge share these (one OpenMP runtime)
torch.set_num_threads(THREADS)
torch.manual_seed(0)
start = time.perf_counter()
print("ctforge", ctforge.__version__, "- torch", torch.__version__, "-", THREADS, "threads")"""),
    new_markdown_cell("""## Simulated data

One 64 x 64 slice of 1 mm pixels, a parallel-beam scan of 24 views over 180° (an eighth of
what a 64-pixel image needs), Poisson noise of 2·10⁴ photons per detector pixel. Each phantom
is a random elliptical body of water-like density (0.02 /mm) holding 3 to 8 random ellipses,
brighter or darker; the ellipsoids are long along z, so the slice is a 2D image."""),
    new_code_cell("""N, VIEWS, I0 = 64, 24, 2e4
geom = ctforge.Geometry.parallel(cols=N, rows=1, pixel_size=1.0,
                                 angles=np.linspace(0, np.pi, VIEWS, endpoint=False))
grid = ctforge.default_grid(geom, shape=(1, N, N), spacing=1.0)


def random_phantom(rng):
    a, b = rng.uniform(20, 28, 2)                       # body semi-axes, mm
    ellipses = [dict(center=[0, 0, 0], semi_axes=[a, b, 500], density=0.02,
                     rotation_deg=rng.uniform(0, 180))]
    for _ in range(rng.integers(3, 9)):
        r, t = rng.uniform(0, 0.6) * min(a, b), rng.uniform(0, 2 * np.pi)
        size = rng.uniform(1.5, 0.4 * min(a, b), 2)
        ellipses.append(dict(center=[r * np.cos(t), r * np.sin(t), 0], semi_axes=[*size, 500],
                             rotation_deg=rng.uniform(0, 180),
                             density=rng.choice([-1, 1]) * rng.uniform(0.003, 0.012)))
    return ctforge.phantom(ellipses)


def simulate(count, seed):
    \"\"\"Truths (count, 1, N, N), noisy sinograms (count, views, 1, N) and their FBPs.\"\"\"
    rng = np.random.default_rng(seed)
    truth, sino, fbp = [], [], []
    for i in range(count):
        phantom = random_phantom(rng)
        truth.append(ctforge.voxelize(phantom, grid))
        p = ctforge.add_poisson_noise(ctforge.project_analytic(phantom, geom), i0=I0,
                                      seed=seed * 100_000 + i)
        sino.append(p)
        fbp.append(ctforge.reconstruct(p, geom, grid, algorithm="fbp", filter="hann",
                                       threads=THREADS))
    return np.stack(truth), np.stack(sino), np.stack(fbp)


train = simulate(160, seed=1)
test = simulate(24, seed=2)             # held out: other phantoms, other noise
print("train:", train[0].shape, train[1].shape, " test:", test[0].shape)
fig, axes = plt.subplots(1, 4, figsize=(10, 2.6))
for ax, img, title in zip(axes, [train[0][0, 0], train[0][1, 0], train[1][0, :, 0, :],
                                 train[2][0, 0]],
                          ["phantom", "phantom", "sinogram (24 views)", "FBP"]):
    ax.imshow(img, cmap="gray", aspect="auto"); ax.set_title(title); ax.axis("off")
plt.tight_layout()"""),
    new_markdown_cell("""## Baselines and the figures of merit

PSNR over the phantom's range and SSIM (Gaussian window, σ = 1.5 pixels), per held-out
phantom. FBP uses the Hann filter (noisy data). The iteration counts of SIRT and CGLS (stopping
early is their regularisation) and the weight of FISTA-TV (least squares plus total variation,
which suits these piecewise-constant phantoms) are chosen on training phantoms, as the
network's weights are."""),
    new_code_cell("""def ssim(x, ref, sigma=1.5):
    \"\"\"Wang et al. (2004) SSIM with a Gaussian window, data range = the reference's range.\"\"\"
    L = float(ref.max() - ref.min())
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    f = lambda im: scipy.ndimage.gaussian_filter(im.astype(np.float64), sigma)
    mx, my = f(x), f(ref)
    vx, vy, cxy = f(x * x) - mx * mx, f(ref * ref) - my * my, f(x * ref) - mx * my
    return float(np.mean((2 * mx * my + c1) * (2 * cxy + c2) /
                         ((mx * mx + my * my + c1) * (vx + vy + c2))))


def scores(recons, truths):
    psnr = [ctforge.compare(r, t)["psnr"] for r, t in zip(recons, truths)]
    return float(np.mean(psnr)), float(np.mean([ssim(r[0], t[0]) for r, t in zip(recons, truths)]))


def iterative(sinos, algorithm, iterations, options):
    return np.stack([ctforge.reconstruct(p, geom, grid, algorithm=algorithm, iterations=iterations,
                                         threads=THREADS, **options) for p in sinos])


candidates = {"SIRT": [("sirt", n, dict(nonnegative=True)) for n in (25, 50, 100, 200)],
              "CGLS": [("cgls", n, {}) for n in (3, 5, 8, 12, 20)],
              "FISTA-TV": [("fista-tv", 100, dict(tv_weight=w, nonnegative=True))
                           for w in (1e-5, 3e-5, 1e-4)]}
tuned = {}
for name, choices in candidates.items():
    psnr = [scores(iterative(train[1][:16], *c), train[0][:16])[0] for c in choices]
    algorithm, iterations, options = tuned[name] = choices[int(np.argmax(psnr))]
    print(f"{name}: training PSNR {np.round(psnr, 2).tolist()} -> {iterations} iterations",
          options.get("tv_weight", ""))"""),
    new_markdown_cell("""## The unrolled network

Five steps; each CNN sees the current image and the data-term gradient (2 channels, 3
convolutions of 16 features). Values are divided by 0.02 /mm (water) so that images are of
order 1; `A` is linear, so the sinograms scale alike. The step sizes start at `1 / |A^T A|`
(power iteration) and the CNNs' last layers at zero, so the untrained network is five Landweber
steps from FBP."""),
    new_code_cell("""SCALE = 0.02
A = ct.ForwardProjection(geom, grid, threads=THREADS)     # [batch, 1, N, N] -> [batch, 24, 1, N]
AT = A.adjoint                                             # the exact transpose, same operator

with torch.no_grad():                                      # |A^T A| by power iteration
    v = torch.rand(1, 1, N, N)
    for _ in range(30):
        v = AT(A(v)); norm = float(v.norm()); v = v / norm
print(f"|A^T A| = {norm:.1f}")


class Unrolled(nn.Module):
    def __init__(self, steps=5, width=16):
        super().__init__()
        self.log_step = nn.Parameter(torch.full((steps,), -float(np.log(norm))))
        self.cnns = nn.ModuleList()
        for _ in range(steps):
            cnn = nn.Sequential(nn.Conv2d(2, width, 3, padding=1), nn.ReLU(),
                                nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                                nn.Conv2d(width, 1, 3, padding=1))
            nn.init.zeros_(cnn[-1].weight); nn.init.zeros_(cnn[-1].bias)
            self.cnns.append(cnn)

    def forward(self, x, y):
        for log_step, cnn in zip(self.log_step, self.cnns):
            grad = AT(A(x) - y)
            x = x - log_step.exp() * grad + cnn(torch.cat([x, grad / norm], dim=1))
        return x


def tensors(data):
    truth, sino, fbp = data
    return (torch.from_numpy(truth / SCALE), torch.from_numpy(sino / SCALE),
            torch.from_numpy(fbp / SCALE))


model = Unrolled()
print(sum(p.numel() for p in model.parameters()), "parameters")"""),
    new_markdown_cell("""## Training

Adam on the mean squared error against the truth, batches of 8, a fixed number of steps (about
a minute on two idle cores); one step is five forward and five back-projections of the batch, and
as many again for the gradient."""),
    new_code_cell("""STEPS, BATCH = 500, 8
truth_t, sino_t, fbp_t = tensors(train)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS)
order = torch.Generator().manual_seed(0)
losses, t0 = [], time.perf_counter()
for step in range(STEPS):
    idx = torch.randint(0, len(truth_t), (BATCH,), generator=order)
    loss = nn.functional.mse_loss(model(fbp_t[idx], sino_t[idx]), truth_t[idx])
    optimizer.zero_grad(); loss.backward(); optimizer.step(); schedule.step()
    losses.append(loss.item())
train_seconds = time.perf_counter() - t0
print(f"{STEPS} steps in {train_seconds:.1f} s; loss {np.mean(losses[:10]):.4f} -> "
      f"{np.mean(losses[-10:]):.4f}; step sizes x |A^T A|:",
      np.round((model.log_step.exp() * norm).tolist(), 2))
plt.figure(figsize=(5, 3))
plt.semilogy(losses); plt.xlabel("step"); plt.ylabel("training MSE (water = 1)")
plt.tight_layout()"""),
    new_markdown_cell("## Held-out phantoms"),
    new_code_cell("""truth_t, sino_t, fbp_t = tensors(test)
with torch.no_grad():
    learned = model(fbp_t, sino_t).numpy() * SCALE
results = {"FBP (Hann)": test[2],
           **{f"{name}, {c[1]} it.": iterative(test[1], *c) for name, c in tuned.items()},
           "unrolled network": learned}
table = {name: scores(recon, test[0]) for name, recon in results.items()}
print(f"{len(test[0])} held-out phantoms, {VIEWS} views, I0 = {I0:g}")
for name, (psnr, s) in table.items():
    print(f"{name:<22}| PSNR {psnr:6.2f} dB | SSIM {s:.3f}")
gain = table["unrolled network"][0] - table["FBP (Hann)"][0]
print(f"gain over FBP: {gain:+.2f} dB; notebook ran {time.perf_counter() - start:.0f} s")"""),
    new_code_cell("""i = 0                                   # one held-out phantom
images = [("truth", test[0][i])] + [(name, recon[i]) for name, recon in results.items()]
fig, axes = plt.subplots(1, len(images), figsize=(2.6 * len(images), 3.0))
for ax, (title, img) in zip(axes, images):
    ax.imshow(img[0], cmap="gray", vmin=0, vmax=0.035)
    if title != "truth":
        title += f"\\n{ctforge.compare(img, test[0][i])['psnr']:.1f} dB"
    ax.set_title(title, fontsize=9); ax.axis("off")
plt.tight_layout()"""),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
path = pathlib.Path(__file__).with_name("learned.ipynb")
nbformat.write(nb, path)
print("wrote", path)
