#!/usr/bin/env bash
# A/B of a kernel change on one lent GPU machine, in one call: the working
# tree's code against a base revision's copy of the changed files, built and
# measured on the same machine (machines of one kind differ by a few percent,
# so only ratios within a call count; docs/gpu.md).
#   here:   bash scripts/gpu_ab.sh prepare REV FILE...   copies REV's FILEs into
#           gpu_ab_base/ (git-ignored; name it in the device call's carry)
#   device: bash scripts/gpu_ab.sh run [TEST...]         builds build-gpu, runs the
#           TESTs (default test_cuda_flash_attention test_cuda_gpt) on the new
#           code, then `bench_gpu_ops attention` and the b 8 training step with
#           its op profile on each code; the base last (its files copied over
#           the tree's). Logs go to $OUT; the lines to compare print last.
set -uo pipefail
cd "$(dirname "$0")/.."
base=gpu_ab_base
case ${1:-} in
  prepare)
    rev=${2:?usage: gpu_ab.sh prepare REV FILE...}
    shift 2
    (($#)) || { echo "gpu_ab: name the files that differ from $rev" >&2; exit 2; }
    # Every FILE checked before anything is written: a path of the repository
    # as git names it (relative, no '.' or '..' part: gpu_ab_base/../X is
    # outside gpu_ab_base), and a file of REV.
    for f in "$@"; do
      case /$f/ in
        //* | */./* | */../*) echo "gpu_ab: '$f' is not a path inside the repository as" \
                                   "git names it (relative, without '.' or '..')" >&2; exit 2 ;;
      esac
      [[ $(git cat-file -t "$rev:$f" 2>/dev/null) == blob ]] ||
        { echo "gpu_ab: '$f' is not a file of $rev" >&2; exit 2; }
    done
    rm -rf -- "$base"
    for f in "$@"; do
      mkdir -p -- "$base/$(dirname -- "$f")" &&
        git show "$rev:$f" >"$base/$f.part" && mv -- "$base/$f.part" "$base/$f" ||
        { echo "gpu_ab: could not copy $rev's $f into $base/" >&2; rm -rf -- "$base"; exit 2; }
    done
    echo "gpu_ab: $base/ holds $rev's $*; carry it: carry=[\"$base\"]"
    ;;
  run)
    shift
    [[ -d $base ]] || { echo "gpu_ab: no $base/ (run 'gpu_ab.sh prepare' here and carry it)" >&2; exit 2; }
    OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_ab.XXXXXX")}
    tests=("$@")
    ((${#tests[@]})) || tests=(test_cuda_flash_attention test_cuda_gpt)
    g=build-gpu/tests/gpu
    build() {
      cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTDP_GPU_ONLY=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
        cmake --build build-gpu -j"$(nproc)" --target "${tests[@]}" bench_gpu_ops bench_gpu_gpt \
          >>"$OUT/build.log" 2>&1
    }
    measure() {  # measure TAG: the kernels alone, then the step with its profile
      timeout 60 $g/bench_gpu_ops attention >"$OUT/ops_$1.log" 2>&1
      timeout 120 $g/bench_gpu_gpt --steps 2 --bf16 1 --flash 1 --recompute 0 --batch 8 \
        --microbatches 4 --profile 1 >"$OUT/step_$1.log" 2>&1
    }
    build || { tail -30 "$OUT/build.log"; exit 1; }
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
    for t in "${tests[@]}"; do
      timeout 120 "$g/$t" >"$OUT/$t.log" 2>&1
      echo "$t: exit $? ($(grep -c FAIL "$OUT/$t.log") lines with FAIL)"
    done
    measure new
    # The base's files replace the tree's for the second build; the tree's
    # are kept and put back however the run ends (a tree with uncommitted
    # edits stays as it was).
    keep=$(mktemp -d "${TMPDIR:-/tmp}/gpu_ab_tree.XXXXXX") || exit 1
    (cd "$base" && find . -type f) >"$keep/files"
    restore() {
      while read -r f; do
        # (a fresh time: the build's objects, newer than the base's files, are then stale)
        if [[ -e $keep/tree/$f ]]; then cp -- "$keep/tree/$f" "$f"; else rm -f -- "$f"; fi
      done <"$keep/files"
      rm -rf -- "$keep"
    }
    while read -r f; do
      if [[ -e $f ]]; then
        mkdir -p -- "$keep/tree/$(dirname -- "$f")" && cp -p -- "$f" "$keep/tree/$f" || { rm -rf -- "$keep"; exit 1; }
      fi
    done <"$keep/files"
    trap restore EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    while read -r f; do mkdir -p -- "$(dirname -- "$f")" && cp -- "$base/$f" "$f"; done <"$keep/files"
    build || { tail -30 "$OUT/build.log"; exit 1; }
    measure base
    for tag in new base; do
      grep -h "^bench" "$OUT/ops_$tag.log" "$OUT/step_$tag.log" | sed "s/^/$tag /"
      grep -h "flash_attention" "$OUT/step_$tag.log" | sed "s/^/$tag /"
    done
    ;;
  *)
    echo "usage: gpu_ab.sh prepare REV FILE... | gpu_ab.sh run [TEST...]" >&2
    exit 2
    ;;
esac
