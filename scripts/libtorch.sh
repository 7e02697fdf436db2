#!/usr/bin/env bash
# Sets up libtorch 2.13.0 (CPU) for the `inference` feature, once, and exports LIBTORCH.
#
# Source it (`source scripts/libtorch.sh`) before any cargo command that builds yardmaster
# with inference (the default): it fetches three wheels from PyPI into a cache directory
# (about 540 MB, once), assembles a libtorch directory from them and exports LIBTORCH. Run it
# (`bash scripts/libtorch.sh`) to print the directory. The directory is reused while it is
# complete, and its path never changes, so torch-sys is not rebuilt between runs.
#
# Why wheels: the PyTorch download host tch's `download-libtorch` uses is out of reach here
# and Debian's libtorch is 1.13. The CPU library of the torch wheel is enough; it needs the
# CUDA runtime and CUPTI libraries at load time (two small NVIDIA wheels) even with no GPU.
# A GPU host uses a full CUDA libtorch instead (README, "Inference").

_ym_libtorch() {
  local version=2.13.0
  local cache="${YARDMASTER_CACHE:-$HOME/.cache/yardmaster}"
  local dir="$cache/libtorch-$version"
  if [ -f "$dir/.complete" ]; then
    echo "$dir"
    return 0
  fi
  local wheels="$cache/wheels"
  mkdir -p "$wheels" || return 1
  echo "libtorch.sh: fetching libtorch $version (CPU) from PyPI into $wheels, once" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" \
    "torch==$version" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 >&2 || return 1
  local staging="$dir.partial"
  rm -rf "$staging" && mkdir -p "$staging/lib" "$staging/include" || return 1
  python3 - "$wheels" "$staging" "$version" <<'PY' || return 1
import glob, os, sys, zipfile
wheels, out, version = sys.argv[1:]
def wheel(prefix):
    found = sorted(glob.glob(os.path.join(wheels, prefix + "*.whl")))
    if not found:
        sys.exit(f"libtorch.sh: no {prefix} wheel in {wheels}")
    return zipfile.ZipFile(found[-1])
torch = wheel(f"torch-{version}-")
libs = {"libtorch_cpu.so", "libc10.so", "libgomp.so.1"}
for name in torch.namelist():
    if name.startswith("torch/include/") and not name.endswith("/"):
        target = os.path.join(out, "include", name[len("torch/include/"):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with torch.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
    elif name.startswith("torch/lib/") and os.path.basename(name) in libs:
        with torch.open(name) as src, open(os.path.join(out, "lib", os.path.basename(name)), "wb") as dst:
            dst.write(src.read())
for prefix, lib in (("nvidia_cuda_runtime-", "libcudart.so.13"), ("nvidia_cuda_cupti-", "libcupti.so.13")):
    archive = wheel(prefix)
    member = next((n for n in archive.namelist() if n.endswith("/lib/" + lib)), None)
    if member is None:
        sys.exit(f"libtorch.sh: {lib} is not in the {prefix} wheel")
    with archive.open(member) as src, open(os.path.join(out, "lib", lib), "wb") as dst:
        dst.write(src.read())
missing = [lib for lib in libs if not os.path.exists(os.path.join(out, "lib", lib))]
if missing:
    sys.exit(f"libtorch.sh: the torch wheel lacks {missing}")
PY
  # torch-sys links -ltorch; the wheel's own libtorch.so wants the CUDA stack.
  ln -s libtorch_cpu.so "$staging/lib/libtorch.so" || return 1
  echo "$version" >"$staging/build-version"
  touch "$staging/.complete"
  rm -rf "$dir" && mv "$staging" "$dir" || return 1
  echo "libtorch.sh: libtorch $version is in $dir" >&2
  echo "$dir"
}

if _ym_libtorch_dir="$(_ym_libtorch)"; then
  export LIBTORCH="$_ym_libtorch_dir"
  unset _ym_libtorch_dir
  # Sourced: leave the caller's shell as it was, LIBTORCH aside. Run: print the directory.
  if [ "${BASH_SOURCE[0]}" = "$0" ]; then echo "$LIBTORCH"; fi
else
  echo "libtorch.sh: could not set up libtorch; build without it: cargo build --no-default-features" >&2
  if [ "${BASH_SOURCE[0]}" = "$0" ]; then exit 1; else return 1; fi
fi
