#!/usr/bin/env bash
# Installs everything narwhal needs on Debian bookworm: the apt packages in
# deploy/apt-packages.txt and the npm test clients in tests/clients.
# Idempotent: re-running it only installs what is missing.
#
#   NARWHAL_DEPS=run   only what building and running narwhal needs: the
#                      packages above the `## tests` line, no npm clients
#   NARWHAL_SKIP_NPM=1 every apt package, no npm clients
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

packages="$(cat "$here/apt-packages.txt")"
if [[ "${NARWHAL_DEPS:-all}" == run ]]; then
  packages="$(sed '/^## tests$/,$d' <<<"$packages")"
  NARWHAL_SKIP_NPM=1
fi
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' <<<"$packages")
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # nodejs/npm may come from a non-Debian install; accept the binaries.
    if [[ "$p" == nodejs ]] && command -v node >/dev/null; then continue; fi
    if [[ "$p" == npm ]] && command -v npm >/dev/null; then continue; fi
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [[ "${NARWHAL_SKIP_NPM:-0}" != 1 ]]; then
  if [[ ! -x "$root/tests/clients/node_modules/.bin/buf" || \
        ! -d "$root/tests/clients/node_modules/openai" ]]; then
    echo "install-deps: installing npm test clients" >&2
    (cd "$root/tests/clients" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
