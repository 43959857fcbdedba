#!/usr/bin/env bash
# Xvfb and OpenGL for the desktop GUI on the GPU machine (no X server, no apt), from the GUI prefix
# that `tools/gpu.sh stage-gui` unpacks (default /tmp/kvscope-gui, KVSCOPE_GUI_PREFIX overrides).
#   source tools/xvfb-gpu.sh [GUI_BINARY]   start Xvfb, export DISPLAY and the GL environment; with
#                                           GUI_BINARY, pick the client GL vendor (below)
#   source tools/xvfb-gpu.sh files          only the files and variables of the GUI and Cairo (fonts,
#                                           fontconfig, X locale), no Xvfb (tools/gpu.sh test)
#   eval "$(bash tools/xvfb-gpu.sh [GUI_BINARY])"   the same from a shell; Xvfb keeps running
#   kvscope_xvfb_stop                       (after sourcing) stops the Xvfb it started
# Xvfb runs from the prefix with Mesa's swrast_dri.so for its GLX extension. The client's GL goes
# through glvnd: NVIDIA's libGLX_nvidia (__GLX_VENDOR_LIBRARY_NAME=nvidia, the GPU) when a
# one-frame screenshot of GUI_BINARY loads and runs it, else Mesa (llvmpipe, CPU).
# KVSCOPE_GL_VENDOR=nvidia|mesa skips that probe. Outside the prefix it writes only where a
# program looks on its own: /usr/bin/xkbcomp (a wrapper: Xvfb runs xkbcomp from there) and
# /usr/local/share/fonts/DejaVuSans*.ttf (where the GUI looks for its font), each only if missing.
# Logs: /tmp/kvscope-gui-logs (KVSCOPE_GUI_LOGS).

kvscope_gui_prefix=${KVSCOPE_GUI_PREFIX:-/tmp/kvscope-gui}
kvscope_gui_logs=${KVSCOPE_GUI_LOGS:-/tmp/kvscope-gui-logs}

kvscope_gui_err() { echo "xvfb-gpu: error: $*" >&2; }

# Fonts, fontconfig and the X locale: what kvscope and Cairo read from fixed system paths.
kvscope_gui_files() {
  local p=$kvscope_gui_prefix
  if [[ ! -f $p/.complete ]]; then
    kvscope_gui_err "no GUI prefix at $p: stage every carried part first (bash tools/gpu.sh stage-gui K, carry .carry-gui/K)"
    return 1
  fi
  mkdir -p "$kvscope_gui_logs" || return 1
  local d have_font=0
  for d in /usr/share/fonts/truetype/dejavu /usr/share/fonts/dejavu /usr/local/share/fonts; do
    [[ -f $d/DejaVuSans.ttf ]] && have_font=1
  done
  if ((!have_font)); then
    if mkdir -p /usr/local/share/fonts &&
      cp "$p"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$p"/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf \
        /usr/local/share/fonts/; then
      echo "xvfb-gpu: DejaVuSans.ttf, DejaVuSans-Bold.ttf -> /usr/local/share/fonts (the GUI's font)"
    else
      kvscope_gui_err "cannot copy DejaVuSans.ttf to /usr/local/share/fonts (the GUI falls back to ImGui's ASCII font)"
    fi
  fi
  if [[ ! -f /etc/fonts/fonts.conf ]]; then
    mkdir -p "$p/etc/fonts" "$p/var/cache/fontconfig"
    cat >"$p/etc/fonts/kvscope-fonts.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>$p/usr/share/fonts</dir>
  <dir>/usr/share/fonts</dir>
  <dir>/usr/local/share/fonts</dir>
  <cachedir>$p/var/cache/fontconfig</cachedir>
</fontconfig>
EOF
    export FONTCONFIG_FILE=$p/etc/fonts/kvscope-fonts.conf
  fi
  [[ -d /usr/share/X11/locale ]] || export XLOCALEDIR=$p/usr/share/X11/locale
  return 0
}

# The directory of NVIDIA's libGLX_nvidia.so.0 when the dynamic linker would not find it by itself.
kvscope_nvidia_glx_dir() {
  ldconfig -p 2>/dev/null | grep -q 'libGLX_nvidia\.so\.0 ' && return 0
  local d ldp=${LD_LIBRARY_PATH:-}
  for d in ${ldp//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e $d/libGLX_nvidia.so.0 ]] && { echo "$d"; return 0; }
  done
  return 1
}

kvscope_xvfb_start() {
  local p=$kvscope_gui_prefix
  kvscope_gui_files || return 1
  local libs="$p/usr/lib/x86_64-linux-gnu:$p/lib/x86_64-linux-gnu"
  local xvfb=$p/usr/bin/Xvfb
  [[ -x $xvfb ]] || { kvscope_gui_err "$xvfb missing (package xvfb)"; return 1; }
  [[ -f $p/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so ]] || {
    kvscope_gui_err "$p/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so missing (package libgl1-mesa-dri): Xvfb would have no GLX"
    return 1
  }
  local missing
  missing=$(LD_LIBRARY_PATH=$libs ldd "$xvfb" "$p/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so" "$p/usr/bin/xkbcomp" 2>&1 | grep 'not found' | sort -u)
  [[ -z $missing ]] || { kvscope_gui_err "libraries missing from $p for Xvfb, swrast or xkbcomp: $(echo $missing)"; return 1; }
  # Xvfb runs "/usr/bin/xkbcomp" (compiled in); put only a wrapper there, nothing else in /.
  if [[ ! -x /usr/bin/xkbcomp ]]; then
    cat >/usr/bin/xkbcomp <<EOF || { kvscope_gui_err "cannot write /usr/bin/xkbcomp (Xvfb needs it)"; return 1; }
#!/bin/sh
# Written by kvscope's tools/xvfb-gpu.sh: Xvfb runs /usr/bin/xkbcomp; this one lives in $p.
LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $p/usr/bin/xkbcomp "\$@"
EOF
    chmod 755 /usr/bin/xkbcomp
    echo "xvfb-gpu: /usr/bin/xkbcomp -> $p/usr/bin/xkbcomp (a wrapper)"
  fi
  mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix
  local n=99
  while [[ -e /tmp/.X$n-lock || -e /tmp/.X11-unix/X$n ]]; do n=$((n + 1)); done
  local log=$kvscope_gui_logs/xvfb-$n.log
  LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LIBGL_DRIVERS_PATH=$p/usr/lib/x86_64-linux-gnu/dri \
    setsid "$xvfb" ":$n" -screen 0 "${KVSCOPE_XVFB_SCREEN:-2560x1600x24}" -nolisten tcp -noreset +extension GLX \
    -xkbdir "$p/usr/share/X11/xkb" </dev/null >"$log" 2>&1 &
  local launcher=$! i
  for ((i = 0; i < 200; i++)); do
    [[ -S /tmp/.X11-unix/X$n && -f /tmp/.X$n-lock ]] && break
    if ! kill -0 "$launcher" 2>/dev/null && [[ ! -f /tmp/.X$n-lock ]]; then break; fi
    sleep 0.1
  done
  if [[ ! -S /tmp/.X11-unix/X$n ]]; then
    kvscope_gui_err "Xvfb :$n did not start; its log ($log):"
    tail -20 "$log" >&2
    return 1
  fi
  sleep 0.2
  KVSCOPE_XVFB_PID=$(tr -d ' \n' <"/tmp/.X$n-lock")
  export KVSCOPE_XVFB_PID
  export DISPLAY=:$n
  export LIBGL_DRIVERS_PATH=$p/usr/lib/x86_64-linux-gnu/dri
  local nv
  kvscope_have_nvidia_glx=1
  nv=$(kvscope_nvidia_glx_dir) || kvscope_have_nvidia_glx=0
  [[ :${LD_LIBRARY_PATH:-}: == *:$nv:* ]] && nv=""
  export LD_LIBRARY_PATH=$libs${nv:+:$nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "xvfb-gpu: Xvfb on DISPLAY=$DISPLAY (pid $KVSCOPE_XVFB_PID, log $log)"
}

kvscope_xvfb_stop() {
  [[ -n ${KVSCOPE_XVFB_PID:-} ]] || return 0
  kill "$KVSCOPE_XVFB_PID" 2>/dev/null
  local i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$KVSCOPE_XVFB_PID" 2>/dev/null || break
    sleep 0.1
  done
  unset KVSCOPE_XVFB_PID
}

# One 640x400 frame of BIN with each vendor in turn; the first whose libGLX_<vendor> was the one
# initialised wins (glvnd falls back to the server's vendor, Mesa, when NVIDIA's cannot load).
kvscope_gl_pick() {
  local bin=$1 v vendors=(nvidia mesa)
  if [[ -n ${KVSCOPE_GL_VENDOR:-} ]]; then
    export __GLX_VENDOR_LIBRARY_NAME=$KVSCOPE_GL_VENDOR
    echo "xvfb-gpu: GL vendor $KVSCOPE_GL_VENDOR (KVSCOPE_GL_VENDOR, not probed)"
    return 0
  fi
  [[ -x $bin ]] || { kvscope_gui_err "$bin is not built"; return 1; }
  if [[ ${kvscope_have_nvidia_glx:-0} == 0 ]]; then
    echo "xvfb-gpu: NVIDIA's libGLX_nvidia.so.0 is not on this machine (ldconfig, /usr/local/nvidia): Mesa only"
    vendors=(mesa)
  fi
  for v in "${vendors[@]}"; do
    local base=$kvscope_gui_logs/probe-$v
    rm -f "$base.png"
    LD_DEBUG=libs __GLX_VENDOR_LIBRARY_NAME=$v timeout 300 "$bin" --screenshot "$base.png" --frames 3 --size 640x400 \
      >"$base.out" 2>"$base.ld"
    local rc=$?
    grep -v '^ *[0-9]*:' "$base.ld" >"$base.err"
    local used
    used=$(grep -o 'calling init: [^ ]*libGLX_[a-z]*\.so[.0-9]*' "$base.ld" | sed 's/.*libGLX_\([a-z]*\)\.so.*/\1/' | grep -v '^$' | sort -u | tr '\n' ' ')
    rm -f "$base.ld"
    if ((rc == 0)) && [[ -s $base.png && " $used" == *" $v "* && ($v == mesa || " $used" != *" mesa "*) ]]; then
      export __GLX_VENDOR_LIBRARY_NAME=$v KVSCOPE_GL_VENDOR=$v
      echo "xvfb-gpu: GL vendor $v ($(
        [[ $v == nvidia ]] && echo "libGLX_nvidia, the GPU" || echo "Mesa llvmpipe, the CPU"
      )); probe: $(tail -1 "$base.out")"
      return 0
    fi
    if ((rc == 0)) && [[ " $used" != *" $v "* ]]; then
      echo "xvfb-gpu: GL vendor $v did not take this display (glvnd loaded: ${used:-none})" >&2
    else
      echo "xvfb-gpu: GL vendor $v failed (exit $rc, glvnd loaded: ${used:-none}); $base.err:" >&2
      tail -5 "$base.err" >&2
    fi
  done
  kvscope_gui_err "no GL vendor could draw a frame on $DISPLAY (logs in $kvscope_gui_logs)"
  return 1
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # Run as a program: start, pick, print the variables for eval; Xvfb (setsid) keeps running.
  set -uo pipefail
  kvscope_xvfb_start >&2 || exit 1
  if [[ -n ${1:-} ]]; then kvscope_gl_pick "$1" >&2 || exit 1; fi
  for v in DISPLAY LD_LIBRARY_PATH LIBGL_DRIVERS_PATH __GLX_VENDOR_LIBRARY_NAME KVSCOPE_GL_VENDOR KVSCOPE_XVFB_PID \
    FONTCONFIG_FILE XLOCALEDIR; do
    [[ -n ${!v:-} ]] && printf 'export %s=%q\n' "$v" "${!v}"
  done
  exit 0
fi
if [[ ${1:-} == files ]]; then
  kvscope_gui_files
else
  kvscope_xvfb_start && { [[ -z ${1:-} ]] || kvscope_gl_pick "$1"; }
fi
