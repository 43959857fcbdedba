#!/usr/bin/env bash
# Downloads the Debian 12 packages the GPU machine needs (it has no apt and no network):
#   .carry/debs       the build's headers/libs: device run `bash tools/gpu.sh all`, carry [".carry"]
#   .carry-gui/<k>/   the desktop GUI's build and runtime set (GLFW, Dear ImGui, Cairo, glvnd, Mesa,
#                     Xvfb; about 62 MiB of .debs), one tar of them cut into parts of at most 18 MiB,
#                     one part per device call (a call carries at most 64 MiB, the tree ~40 of it):
#                     `bash tools/gpu.sh stage-gui K` with carry [".carry-gui/K"], then
#                     `bash tools/gpu.sh gui -- COMMAND` (README "GPU build", tools/gpu.sh)
#   tools/fetch-gpu-debs.sh [all|base|gui]   (default all)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
die() {
  echo "fetch-gpu-debs: error: $*" >&2
  exit 1
}
[[ $what == all || $what == base || $what == gui ]] || die "unknown argument '$what' (all, base or gui)"
command -v apt-get >/dev/null || die "apt-get not found: run this on the Debian 12 development machine"

if [[ $what != gui ]]; then
  mkdir -p "$root/.carry/debs" && cd "$root/.carry/debs" || die "cannot create $root/.carry/debs"
  apt-get download nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev googletest libpcre2-dev libpcre2-8-0 \
    libbenchmark-dev libbenchmark1debian libsqlite3-dev libsqlite3-0 libzstd-dev libzstd1 libtomlplusplus-dev wamerican wordnet-base ||
    die "apt-get download of the build packages failed (apt-get update first?)"
  # Cairo and the GUI come from .carry-gui (below); without them tools/gpu.sh builds with GUI and VIZ off.
fi
[[ $what == base ]] && exit 0

# The GUI set: the shared-library closure (ldd) of the kvscope binary's GUI libraries, of Xvfb, of
# xkbcomp and of Mesa's swrast_dri.so, less libc6, libstdc++6, libgcc-s1 and zlib1g (the GPU
# machine has them), plus the headers the build includes and the data the programs read. Not
# apt's whole Depends (perl, python, every font).
gui_build=(
  libglfw3-dev libimgui-dev libstb-dev libcairo2-dev # GLFW/glfw3.h + cmake config, imgui.h + libimgui.a + the
  libgl-dev libglx-dev libopengl-dev                 # GLFW/OpenGL3 backends, libstb.so, cairo*.h, GL/gl.h, libGL/GLX/OpenGL.so
)
gui_client=(
  libglfw3 libstb0 libcairo2 libpixman-1-0 libpng16-16 libfreetype6 libfontconfig1 libbrotli1 libexpat1
  libglvnd0 libgl1 libglx0 libopengl0 libglx-mesa0 libglapi-mesa libdrm2 libxshmfence1
  libx11-6 libx11-data libx11-xcb1 libxau6 libxdmcp6 libbsd0 libmd0 libxext6 libxfixes3 libxrender1
  libxcursor1 libxrandr2 libxinerama1 libxi6 libxxf86vm1 # GLFW dlopens these
  libxcb1 libxcb-render0 libxcb-shm0 libxcb-glx0 libxcb-dri2-0 libxcb-dri3-0 libxcb-present0 libxcb-randr0
  libxcb-sync1 libxcb-xfixes0
  fonts-dejavu-core # DejaVuSans(-Bold).ttf: the GUI's fonts (app/gui/imgui_canvas.cpp find_font) and Cairo's
)
gui_server=(
  xvfb libxfont2 libfontenc1 libaudit1 libcap-ng0 libselinux1 libpcre2-8-0 libgcrypt20 libgpg-error0 libsystemd0
  libcap2 liblz4-1 liblzma5 libzstd1 libunwind8 libbz2-1.0
  x11-xkb-utils libxkbfile1 xkb-data # xkbcomp + keymaps: Xvfb compiles its keymap at start
  libgl1-mesa-dri libllvm15 libedit2 libtinfo6 libffi8 libxml2 libicu72 libz3-4 libelf1 libsensors5
  libdrm-amdgpu1 libdrm-intel1 libdrm-nouveau2 libdrm-radeon1 libpciaccess0 # swrast_dri.so: Xvfb's GLX
)
part_max=$((18 * 1024 * 1024))
chunk=$((part_max - 64 * 1024)) # room for the MANIFEST in each part

gui_dir="$root/.carry-gui"
exclude="$root/.git/info/exclude"
if [[ -d $root/.git/info ]] && ! grep -qxF '/.carry-gui/' "$exclude" 2>/dev/null; then
  echo '/.carry-gui/' >>"$exclude" || die "cannot write $exclude"
fi
mkdir -p "$gui_dir" || die "cannot create $gui_dir"
rm -rf "$gui_dir/.download" "$gui_dir"/[0-9]*
dl="$gui_dir/.download"
mkdir -p "$dl/debs"
(cd "$dl/debs" && apt-get download "${gui_build[@]}" "${gui_client[@]}" "${gui_server[@]}") ||
  die "apt-get download of the GUI packages failed (apt-get update first?)"
n_debs=$(find "$dl/debs" -name '*.deb' | wc -l)
((n_debs == ${#gui_build[@]} + ${#gui_client[@]} + ${#gui_server[@]})) || die "expected $((${#gui_build[@]} + ${#gui_client[@]} + ${#gui_server[@]})) .deb files, got $n_debs"

# One tar of every .deb, cut with split -b into chunks; chunk k-1 goes to part k with the MANIFEST
# (sha256 of every chunk and .deb), which tools/gpu.sh stage-gui checks.
(cd "$dl/debs" && tar -cf "$dl/gui-debs.tar" --sort=name --owner=0 --group=0 --numeric-owner -- *.deb) || die "tar failed"
(cd "$dl" && split -b "$chunk" -d -a 2 gui-debs.tar gui-debs.tar.) || die "split failed"
rm -f "$dl/gui-debs.tar"
chunks=("$dl"/gui-debs.tar.[0-9][0-9])
n_parts=${#chunks[@]}
manifest="$dl/MANIFEST"
{
  echo "# kvscope GUI packages for the GPU machine (tools/fetch-gpu-debs.sh, Debian 12, $(date -u +%F))"
  echo "parts $n_parts"
  k=0
  for c in "${chunks[@]}"; do
    k=$((k + 1))
    echo "chunk $k $(sha256sum "$c" | cut -d' ' -f1) $(stat -c %s "$c") $(basename "$c")"
  done
  for f in "$dl"/debs/*.deb; do
    echo "deb $(sha256sum "$f" | cut -d' ' -f1) $(stat -c %s "$f") $(basename "$f")"
  done
} >"$manifest"
k=0
for c in "${chunks[@]}"; do
  k=$((k + 1))
  mkdir -p "$gui_dir/$k"
  mv "$c" "$gui_dir/$k/" && cp "$manifest" "$gui_dir/$k/" || die "cannot fill $gui_dir/$k"
  size=$(du -cb "$gui_dir/$k"/* | tail -1 | cut -f1)
  ((size <= part_max)) || die "$gui_dir/$k is $size bytes, over $part_max"
done
rm -rf "$dl"

echo "GUI set: $n_debs packages, $n_parts parts (each <= 18 MiB; stage all of them, back to back):"
for ((k = 1; k <= n_parts; k++)); do
  size=$(du -cb "$gui_dir/$k"/* | tail -1 | cut -f1)
  printf '  .carry-gui/%d  %5.1f MiB  %s\n' "$k" "$(awk -v s="$size" 'BEGIN { print s / 1048576 }')" \
    "$([[ $k -lt $n_parts ]] && echo "bash tools/gpu.sh stage-gui $k        carry [\".carry-gui/$k\"]" ||
      echo "bash tools/gpu.sh gui -- COMMAND    carry [\".carry\", \".carry-gui/$k\"]")"
done
