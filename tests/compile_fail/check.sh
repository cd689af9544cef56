#!/usr/bin/env bash
# check.sh CXX INCLUDE_DIR FILE — compiles FILE, which starts with "// expect: MESSAGE":
# passes when it fails to compile and the diagnostics contain MESSAGE, or, for
# "// expect: compiles", when it compiles.
set -uo pipefail
cxx=$1 inc=$2 file=$3
expect=$(sed -n '1s|^// expect: ||p' "$file")
out=$("$cxx" -std=c++20 -fsyntax-only -I"$inc" "$file" 2>&1)
status=$?
if [[ "$expect" == compiles ]]; then
  ((status == 0)) && exit 0
  echo "$file: expected to compile, but:"; echo "$out" | head -20; exit 1
fi
if ((status == 0)); then echo "$file: compiled, but must not"; exit 1; fi
if grep -qF -- "$expect" <<<"$out"; then exit 0; fi
echo "$file: failed to compile without the message \"$expect\":"; echo "$out" | grep -E 'error' | head -10
exit 1
