#!/usr/bin/env bash
# Makes DeepSpeed's released affine shard map module runnable as a shardcheck target
# without installing DeepSpeed (whose wheel pulls a multi-GB torch): downloads the sdist
# from the package registry into out/deepspeed/ (git-ignored), unpacks it, points
# out/deepspeed/current at it, and installs Debian's python3-torch when torch is missing.
#
#   bash scripts/deepspeed-target.sh [VERSION]        (default 0.19.8)
#   export SHARDCHECK_DEEPSPEED_PATH=$PWD/out/deepspeed/current   (printed at the end)
#   shardcheck campaign --target deepspeed --time 60
#
# DeepSpeed's code stays in out/, never in the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-0.19.8}
python=/usr/bin/python3
dest=$root/out/deepspeed
tree=$dest/deepspeed-$version

missing=()
"$python" -c 'import torch, numpy' >/dev/null 2>&1 || missing+=(python3-torch python3-numpy)
"$python" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if ((${#missing[@]})); then
  echo "deepspeed-target: installing ${missing[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$tree/deepspeed/checkpoint/affine.py" ]; then
  mkdir -p "$dest"
  archive=$dest/deepspeed-$version.tar.gz
  if [ ! -f "$archive" ]; then
    # --no-deps --no-binary: the source archive only; nothing is installed.
    "$python" -m pip download --quiet --no-deps --no-binary :all: "deepspeed==$version" -d "$dest"
  fi
  tar -xzf "$archive" -C "$dest"
fi
ln -sfn "deepspeed-$version" "$dest/current"

# The module must load the way the adapter loads it, and answer the handshake.
echo '{"id": 1, "op": "hello", "protocol": 1}' |
  SHARDCHECK_DEEPSPEED_PATH=$tree "$python" "$root/adapters/deepspeed/serve.py"
echo "export SHARDCHECK_DEEPSPEED_PATH=$tree"
