#!/bin/sh
# check_exports.sh LIBPTDP.so HEADER...   (capi/ptdp.h capi/ptdp_tools.h)
#
# libptdp.so must export exactly its C ABI (ARCHITECTURE §6):
#   1. every dynamic symbol the library defines starts with ptdp_ (besides the
#      linker's own _init, _fini, __bss_start, _edata, _end, and version nodes);
#   2. every function declared with PTDP_API in the headers is exported, as a
#      function (T), and every exported ptdp_ function is declared in one of them.
set -u
LC_ALL=C
export LC_ALL

if [ $# -lt 2 ]; then
  echo "usage: $0 LIBPTDP.so HEADER..." >&2
  exit 2
fi
lib=$1
shift
header="$*"
[ -r "$lib" ] || { echo "FAIL: cannot read library '$lib'" >&2; exit 1; }
for h in "$@"; do
  [ -r "$h" ] || { echo "FAIL: cannot read header '$h'" >&2; exit 1; }
done
command -v nm >/dev/null 2>&1 || { echo "FAIL: nm not found" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptdp_exports.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# "VALUE TYPE NAME" -> "TYPE NAME"; strip a symbol version suffix (@VER or @@VER).
if ! nm -D --defined-only "$lib" >"$tmp/nm.txt"; then
  echo "FAIL: nm -D --defined-only '$lib' failed" >&2
  exit 1
fi
awk 'NF >= 2 { name = $NF; type = $(NF - 1); sub(/@.*/, "", name); print type, name }' \
  "$tmp/nm.txt" | sort -u >"$tmp/exports.txt"
if [ ! -s "$tmp/exports.txt" ]; then
  echo "FAIL: '$lib' exports no symbols" >&2
  exit 1
fi

status=0

# 1. nothing but ptdp_ symbols
awk '$2 !~ /^ptdp_/ && $2 !~ /^(_init|_fini|__bss_start|_edata|_end|_DYNAMIC|_GLOBAL_OFFSET_TABLE_)$/ \
     && $1 != "A"' "$tmp/exports.txt" >"$tmp/foreign.txt"
if [ -s "$tmp/foreign.txt" ]; then
  n=$(wc -l <"$tmp/foreign.txt")
  echo "FAIL: $lib exports $n symbol(s) that do not start with ptdp_:" >&2
  if command -v c++filt >/dev/null 2>&1; then
    # demangled, one per line: "  TYPE name"
    awk '{ print $1 }' "$tmp/foreign.txt" >"$tmp/types.txt"
    awk '{ print $2 }' "$tmp/foreign.txt" | c++filt | paste -d' ' "$tmp/types.txt" - |
      sed 's/^/  /' >&2
  else
    sed 's/^/  /' "$tmp/foreign.txt" >&2
  fi
  status=1
else
  echo "ok   every exported symbol starts with ptdp_"
fi

# 2. every PTDP_API function of the header is exported as a function.
# Declarations: "PTDP_API <type> <name>(" on one line; skip the #define lines.
cat "$@" | grep -E '^[[:space:]]*PTDP_API[[:space:]]' |
  sed -E 's/\(.*//; s/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*$/\1/' |
  sort -u >"$tmp/declared.txt"
if [ ! -s "$tmp/declared.txt" ]; then
  echo "FAIL: found no PTDP_API declarations in '$header'" >&2
  exit 1
fi
ndecl=$(wc -l <"$tmp/declared.txt")
awk '$1 == "T" { print $2 }' "$tmp/exports.txt" | sort -u >"$tmp/functions.txt"
missing=$(comm -23 "$tmp/declared.txt" "$tmp/functions.txt")
if [ -n "$missing" ]; then
  echo "FAIL: functions declared with PTDP_API in $header but not exported by $lib:" >&2
  echo "$missing" | sed 's/^/  /' >&2
  status=1
else
  echo "ok   all $ndecl PTDP_API functions of $header are exported"
fi

# Exported ptdp_ functions the header does not declare are worth knowing about.
extra=$(grep '^ptdp_' "$tmp/functions.txt" | comm -13 "$tmp/declared.txt" -)
if [ -n "$extra" ]; then
  echo "FAIL: exported ptdp_ functions not declared with PTDP_API in $header:" >&2
  echo "$extra" | sed 's/^/  /' >&2
  status=1
fi

[ $status -eq 0 ] && echo "PASS: $lib exports exactly the C ABI of $header"
exit $status
