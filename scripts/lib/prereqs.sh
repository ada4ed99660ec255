# Installs what the build and tests need but a fresh machine may lack (Debian packages only).
# Sourced by scripts/*.sh. Needs root (or sudo) only when something is missing.
ensure_prereqs() {
  local missing=()
  command -v go >/dev/null || { echo "error: Go 1.26 is required to build the local control plane (not found on PATH)" >&2; return 1; }
  command -v cargo >/dev/null || { echo "error: cargo (Rust 1.94+) is required (not found on PATH)" >&2; return 1; }
  command -v jq >/dev/null || missing+=(jq)
  command -v curl >/dev/null || missing+=(curl)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v setsid >/dev/null || missing+=(util-linux)
  command -v ss >/dev/null || missing+=(iproute2)
  pg_bin_dir >/dev/null 2>&1 || missing+=(postgresql)
  # The container images (scripts/build-images.sh): buildah builds FROM scratch without a
  # registry; the CA bundle goes into the images.
  command -v buildah >/dev/null || missing+=(buildah)
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  if ((${#missing[@]})); then
    echo "installing missing packages: ${missing[*]}" >&2
    local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# Headless Chromium and its WebDriver for the console's browser tests (only the test suite
# needs them, so the demo does not download a browser).
ensure_browser() {
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
  if ((${#missing[@]})); then
    echo "installing missing packages for the browser tests: ${missing[*]}" >&2
    local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# The directory holding initdb/pg_ctl/postgres (Debian keeps them out of PATH).
pg_bin_dir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
  done
  return 1
}
