#!/bin/sh
# check_deprecated.sh CC SOURCE_DIR TMPDIR
#
# Each superseded C ABI function, called from C through capi/ptdp_tools.h:
# an error under -Werror=deprecated-declarations whose text names its
# replacement, and no error with PTDP_ALLOW_DEPRECATED defined.
set -u
cc=$1 src=$2 tmp=$3
mkdir -p "$tmp" || exit 1
status=0
check() {  # check NAME CALL REPLACEMENT
  printf '#include "capi/ptdp_tools.h"\nvoid f(void) { (void)%s; }\n' "$2" >"$tmp/$1.c"
  if "$cc" -std=c99 -fsyntax-only -Werror=deprecated-declarations -I"$src" "$tmp/$1.c" \
      >"$tmp/$1.log" 2>&1; then
    echo "FAIL: $1 compiles without a deprecation error"; status=1
  elif ! grep -q "$3" "$tmp/$1.log"; then
    echo "FAIL: $1's deprecation does not name $3:"; cat "$tmp/$1.log"; status=1
  elif ! "$cc" -std=c99 -fsyntax-only -Werror -DPTDP_ALLOW_DEPRECATED -I"$src" "$tmp/$1.c"; then
    echo "FAIL: $1 does not compile with PTDP_ALLOW_DEPRECATED"; status=1
  else
    echo "ok   $1 -> $3"
  fi
}
check ptdp_tokenize 'ptdp_tokenize(0, 0, 0, 0, 0, 0, 0)' ptdp_tokenize_options
check ptdp_trainer_generate 'ptdp_trainer_generate(0, 0, 0, 0, 0, 0, 0, 0)' ptdp_trainer_generate_top
check ptdp_checkpoint_export_safetensors 'ptdp_checkpoint_export_safetensors(0, 0)' \
  ptdp_checkpoint_export_safetensors_dtype
exit $status
