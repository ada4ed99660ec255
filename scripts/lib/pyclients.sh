# The Python venv of the real clients the cluster tests drive orb with (tests/clients/
# requirements.txt: the MCP SDK, the generated REST client's runtime). Cached outside the repo
# under a hash of the requirements, so a change of pins builds a new one and a warm machine
# only checks it. Sourced by scripts/*.sh.
py_clients_venv() { # prints the venv's python
  local repo req hash dir
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  req="$repo/tests/clients/requirements.txt"
  command -v python3 >/dev/null || { echo "error: python3 (3.10+) is required for the client tests (not found on PATH)" >&2; return 1; }
  hash="$(sha256sum <"$req" | cut -c1-16)"
  dir="${ORB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs}/py-clients-$hash"
  if [[ ! -x "$dir/bin/python" || ! -f "$dir/.complete" ]]; then
    echo "building the client venv $dir from $req" >&2
    rm -rf "$dir"
    python3 -m venv "$dir" >&2 || { echo "error: python3 -m venv failed; on Debian install python3-venv" >&2; return 1; }
    "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2 \
      || { echo "error: pip could not install $req into $dir (is PyPI reachable?)" >&2; return 1; }
    touch "$dir/.complete"
  fi
  echo "$dir/bin/python"
}
