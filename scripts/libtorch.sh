#!/usr/bin/env bash
# Sets up libtorch 2.13.0 for the `inference` feature, once, and exports LIBTORCH.
#
# Source it (`source scripts/libtorch.sh`) before any cargo command that builds yardmaster
# with inference (the default): it fetches wheels from PyPI into a cache directory (once),
# assembles a libtorch directory from them and exports LIBTORCH. Run it
# (`bash scripts/libtorch.sh`) to print the directory. The directory is reused while it is
# complete, and its path never changes, so torch-sys is not rebuilt between runs.
#
# Two variants, by YARDMASTER_LIBTORCH:
# - `cpu` (the default): the CPU library of the torch wheel, plus the CUDA runtime and CUPTI
#   libraries it needs at load time even with no GPU (two small NVIDIA wheels): about 540 MB
#   of wheels, libtorch-2.13.0/.
# - `cuda`, for a GPU host: the whole CUDA build, from the same torch wheel and the NVIDIA
#   runtime wheels it depends on on PyPI (cuBLAS, cuDNN, NCCL, ...): about 2.6 GB of wheels
#   and 3.6 GB assembled, libtorch-2.13.0-cuda/. It needs an NVIDIA driver for CUDA 13 on
#   the host (libcuda.so.1 comes from the driver, not from here); without a GPU it loads
#   and runs on the CPU. build.rs keeps libtorch_cuda linked (the linker would drop it), so
#   a build against this directory can use the GPU (`yardmaster inference check` says).
#
# Why wheels: the PyTorch download host tch's `download-libtorch` uses is out of reach here
# and Debian's libtorch is 1.13.

_ym_libtorch() {
  local version=2.13.0
  local variant="${YARDMASTER_LIBTORCH:-cpu}"
  local cache="${YARDMASTER_CACHE:-$HOME/.cache/yardmaster}"
  local dir wheels
  case "$variant" in
    cpu) dir="$cache/libtorch-$version" wheels="$cache/wheels" ;;
    cuda) dir="$cache/libtorch-$version-cuda" wheels="$cache/wheels-cuda-$version" ;;
    *)
      echo "libtorch.sh: YARDMASTER_LIBTORCH is '$variant'; it can be cpu or cuda" >&2
      return 1
      ;;
  esac
  if [ -f "$dir/.complete" ]; then
    echo "$dir"
    return 0
  fi
  mkdir -p "$wheels" || return 1
  echo "libtorch.sh: fetching libtorch $version ($variant) from PyPI into $wheels, once" >&2
  if [ "$variant" = cuda ]; then
    # With its dependencies: the NVIDIA wheels at the versions this torch was built with.
    python3 -m pip download --quiet --only-binary=:all: -d "$wheels" "torch==$version" >&2 || return 1
  else
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" \
      "torch==$version" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 >&2 || return 1
  fi
  local staging="$dir.partial"
  rm -rf "$staging" && mkdir -p "$staging/lib" "$staging/include" || return 1
  python3 - "$wheels" "$staging" "$version" "$variant" <<'PY' || return 1
import glob, os, re, shutil, sys, zipfile
wheels, out, version, variant = sys.argv[1:]
def wheel(prefix):
    found = sorted(glob.glob(os.path.join(wheels, prefix + "*.whl")))
    if not found:
        sys.exit(f"libtorch.sh: no {prefix} wheel in {wheels}")
    return zipfile.ZipFile(found[-1])
def extract(archive, name):
    with archive.open(name) as src, open(os.path.join(out, "lib", os.path.basename(name)), "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
torch = wheel(f"torch-{version}-")
libs = {"libtorch_cpu.so", "libc10.so", "libgomp.so.1"}
if variant == "cuda":
    # libtorch.so itself (the CPU variant links its own stand-in), the CUDA libraries and
    # what they load later (cuda_linalg, nvrtc's shim, nvshmem); not the Python bindings.
    libs |= {"libtorch.so", "libtorch_cuda.so", "libc10_cuda.so", "libtorch_cuda_linalg.so",
             "libtorch_nvshmem.so", "libcaffe2_nvrtc.so", "libtorch_global_deps.so"}
for name in torch.namelist():
    if name.startswith("torch/include/") and not name.endswith("/"):
        target = os.path.join(out, "include", name[len("torch/include/"):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with torch.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
    elif name.startswith("torch/lib/") and os.path.basename(name) in libs:
        extract(torch, name)
if variant == "cuda":
    # Every shared library of every NVIDIA wheel, side by side: the torch libraries find
    # them through their RPATH's $ORIGIN, and cuDNN its engine libraries the same way.
    shared = re.compile(r"^nvidia/.*/lib/[^/]+\.so(\.[0-9]+)*$")
    for path in sorted(glob.glob(os.path.join(wheels, "nvidia_*.whl"))):
        archive = zipfile.ZipFile(path)
        for name in archive.namelist():
            if shared.match(name):
                extract(archive, name)
    libs |= {"libcudart.so.13", "libcublas.so.13", "libcudnn.so.9", "libnccl.so.2"}
else:
    for prefix, lib in (("nvidia_cuda_runtime-", "libcudart.so.13"), ("nvidia_cuda_cupti-", "libcupti.so.13")):
        archive = wheel(prefix)
        member = next((n for n in archive.namelist() if n.endswith("/lib/" + lib)), None)
        if member is None:
            sys.exit(f"libtorch.sh: {lib} is not in the {prefix} wheel")
        extract(archive, member)
missing = [lib for lib in libs if not os.path.exists(os.path.join(out, "lib", lib))]
if missing:
    sys.exit(f"libtorch.sh: the torch wheel lacks {missing}")
PY
  # torch-sys links -ltorch; on the CPU variant that is libtorch_cpu (the wheel's own
  # libtorch.so wants the CUDA stack).
  if [ "$variant" = cpu ]; then
    ln -s libtorch_cpu.so "$staging/lib/libtorch.so" || return 1
  fi
  echo "$version" >"$staging/build-version"
  touch "$staging/.complete"
  rm -rf "$dir" && mv "$staging" "$dir" || return 1
  echo "libtorch.sh: libtorch $version ($variant) is in $dir" >&2
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
