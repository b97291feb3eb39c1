#!/usr/bin/env bash
# Stages the headers, static libraries and pkg-config files of the tokenizer's dependencies
# (PCRE2, utf8proc) into build-deps/ (git-ignored), for build machines that lack the Debian -dev
# packages and cannot install them (the GPU machines have no network). Carry build-deps/ there and
# configure with PKG_CONFIG_PATH=$PWD/build-deps/lib/pkgconfig (tools/gpu_check.sh does when the
# folder exists). Both libraries are linked statically, so nothing else is needed at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-deps
rm -rf "$out"
mkdir -p "$out/include" "$out/lib/pkgconfig"
multiarch=$(gcc -print-multiarch)
for pc in libpcre2-8 libutf8proc; do
  cp "/usr/lib/$multiarch/pkgconfig/$pc.pc" "$out/lib/pkgconfig/"
done
cp /usr/include/pcre2.h /usr/include/utf8proc.h "$out/include/"
cp "/usr/lib/$multiarch/libpcre2-8.a" "/usr/lib/$multiarch/libutf8proc.a" "$out/lib/"
# Point the .pc files at the staged copies, wherever the folder ends up.
sed -i -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' \
  -e 's|^libdir=.*|libdir=${prefix}/lib|' -e 's|^includedir=.*|includedir=${prefix}/include|' \
  "$out"/lib/pkgconfig/*.pc
echo "staged $(du -sh "$out" | cut -f1) in $out"
