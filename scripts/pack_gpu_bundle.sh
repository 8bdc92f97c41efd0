#!/usr/bin/env bash
# Packs the full build's GPU-side binaries, with the shared libraries the GPU
# machine lacks (LuaJIT, HDF5, Open MPI, OpenBLAS and what they pull in), into
# build/gpu_bundle.tar.xz, for the device tool's `carry`. scripts/gpu_check.sh
# unpacks it there and runs the trainer on the GPU (test_cuda_trainer) and a
# training run of the launcher; without the bundle it skips those.
#   usage: bash scripts/pack_gpu_bundle.sh     (after scripts/build.sh)
#   then:  run(command="bash scripts/gpu_check.sh", carry=["build/gpu_bundle.tar.xz"])
# Left out: the C library and the compiler's runtime (the GPU machine's are
# newer, and binaries built against Debian 12's run on them), and the CUDA
# libraries, which the GPU machine has for itself.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake --build "$build" -j2 --target ptdp_launcher test_cuda_trainer test_nccl_comm
stage=$build/gpu_bundle
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
bins=("$build/ptdp" "$build/tests/gpu/test_cuda_trainer" "$build/tests/gpu/test_nccl_comm")
cp "${bins[@]}" "$stage/bin/"
system='^(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)\.so'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $system ]] && continue
  cp -L "$path" "$stage/lib/$name"
done
tar -C "$build" -cJf "$build/gpu_bundle.tar.xz" gpu_bundle
echo "wrote $build/gpu_bundle.tar.xz ($(du -h "$build/gpu_bundle.tar.xz" | cut -f1)):" \
  "$(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries"
