#!/usr/bin/env bash
# The device tool sends the working tree (tracked files included) up to 64 MiB; the embedded
# models make the tree larger than that. `slim` takes the named embedded models out of git's index
# and ignores them (.git/info/exclude) so that a device call does not send them; `restore` puts
# them back. Commit nothing in between.
#   tools/device-tree.sh slim [MODEL...]   (default: pycode-16m pycode-recall-17m)
#   tools/device-tree.sh restore
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude)
case ${1:-} in
  slim)
    shift
    models=("$@")
    ((${#models[@]})) || models=(pycode-16m pycode-recall-17m)
    mkdir -p "$(dirname "$exclude")"
    for m in "${models[@]}"; do
      [[ -d assets/models/$m ]] || { echo "device-tree: no assets/models/$m" >&2; exit 1; }
      git rm -r --cached -q "assets/models/$m"
      echo "/assets/models/$m/" >>"$exclude"
    done
    echo "device-tree: left out ${models[*]}; the tree that travels: $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) bytes tracked"
    ;;
  restore)
    [[ -f $exclude ]] && sed -i "\|^/assets/models/[^/]*/\$|d" "$exclude"
    git reset -q -- assets/models
    echo "device-tree: restored"
    ;;
  *)
    echo "usage: tools/device-tree.sh slim [MODEL...] | restore" >&2
    exit 1
    ;;
esac
