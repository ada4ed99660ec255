#!/usr/bin/env bash
# Builds the container images of orb and pdb-operator on a machine without any registry:
# static release binaries (glibc with crt-static, rustls for TLS, SQLite bundled) in FROM
# scratch images (deploy/images/Containerfile.prebuilt), built by buildah from Debian.
#
# Cached outside the repo in $ORB_CACHE_DIR/images/<key> (default ~/.cache/orb-rs), keyed by
# everything the binaries are compiled from (the six crates without their tests and benches,
# Cargo.toml/Cargo.lock, .cargo, deploy/images, this script, rustc's version): with unchanged
# sources a run only checks the key. The release build keeps its own target directory
# ($ORB_CACHE_DIR/image-target), so after a source change only orb's own crates recompile.
#
# Prints the image directory on the last line of stdout; tests read it from ORB_IMAGES_DIR:
#   export ORB_IMAGES_DIR="$(scripts/build-images.sh | tail -n1)"
# It holds, for each image NAME (orb, pdb-operator):
#   NAME/rootfs/      the unpacked image (its files, owners and modes), for chroot runs
#   NAME/image.json   `buildah inspect` of the image (user, entrypoint, labels)
#   NAME.oci.tar      the image as an OCI archive: `podman load -i`, `skopeo copy
#                     oci-archive:NAME.oci.tar docker://registry.example/NAME:TAG`
#   images.env        names, tags and sizes
# and the images stay in buildah's local storage as localhost/NAME:<Cargo version>.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cache_root="${ORB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs}"
images_root="$cache_root/images"
release_target="$cache_root/image-target"
names=(orb pdb-operator)
ca_bundle=/etc/ssl/certs/ca-certificates.crt

die() { echo "build-images: error: $*" >&2; exit 1; }
command -v buildah >/dev/null || die "buildah is not installed; apt-get install buildah (scripts/lib/prereqs.sh installs it)"
command -v cargo >/dev/null || die "cargo is not on PATH"
[[ -f $ca_bundle ]] || die "$ca_bundle is missing; apt-get install ca-certificates"

# The workspace version, which is also the image tag and the charts' appVersion.
version=$(awk -F'"' '/^\[workspace.package\]/ {p = 1} p && /^version *=/ {print $2; exit}' Cargo.toml)
[[ -n $version ]] || die "no version in Cargo.toml's [workspace.package]"
target="$(uname -m)-unknown-linux-gnu"

source_files() {
  {
    if git rev-parse --git-dir >/dev/null 2>&1; then
      git ls-files --cached --others --exclude-standard -- \
        Cargo.toml Cargo.lock .cargo deploy/images scripts/build-images.sh \
        crates/orb-core crates/orb-store crates/orb-k8s crates/orb-broker crates/orb crates/pdb-operator
    else
      find Cargo.toml Cargo.lock .cargo deploy/images scripts/build-images.sh \
        crates/orb-core crates/orb-store crates/orb-k8s crates/orb-broker crates/orb crates/pdb-operator -type f
    fi
  } | grep -Ev '^crates/[^/]+/(tests|benches|deploy)/' | LC_ALL=C sort -u
}

cache_key() {
  local f
  {
    rustc -vV
    echo "target=$target version=$version"
    source_files | while IFS= read -r f; do
      [[ -f $f ]] && printf '%s  %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
    done
  } | sha256sum | cut -c1-16
}

key=$(cache_key)
dir="$images_root/$version-$key"

# Puts the tag localhost/NAME:VERSION back on the cached image when buildah's storage lost it
# or another build moved it (another checkout with other sources).
retag_from_cache() {
  local name want have
  for name in "${names[@]}"; do
    want=$(cat "$dir/$name/image-id")
    have=$(buildah inspect --type image --format '{{.FromImageID}}' "localhost/$name:$version" 2>/dev/null || true)
    if [[ $have != "$want" ]]; then
      echo "build-images: loading localhost/$name:$version from $dir/$name.oci.tar" >&2
      buildah pull --quiet "oci-archive:$dir/$name.oci.tar" >/dev/null
    fi
  done
}

if [[ -f $dir/complete ]]; then
  echo "build-images: images for these sources are cached ($dir)" >&2
  retag_from_cache
  echo "$dir"
  exit 0
fi

# One build at a time on this machine: checkouts with other sources share the release target
# directory, and one must not replace the binaries while another copies them into its images.
mkdir -p "$cache_root"
exec 9>"$cache_root/build-images.lock"
flock 9
if [[ -f $dir/complete ]]; then
  echo "build-images: images for these sources were built meanwhile ($dir)" >&2
  retag_from_cache
  echo "$dir"
  exit 0
fi

echo "build-images: building static release binaries for $target (cached in $release_target)" >&2
t0=$(date +%s)
CARGO_TARGET_DIR="$release_target" CARGO_INCREMENTAL=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
  RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --target "$target" -p orb -p pdb-operator --bins >&2
t1=$(date +%s)
bin="$release_target/$target/release"
for name in "${names[@]}"; do
  # A scratch image has no loader: a binary that needs one would not start in it.
  ldd "$bin/$name" 2>&1 | grep -Eq 'not a dynamic executable|statically linked' \
    || die "$bin/$name is not statically linked: $(ldd "$bin/$name" 2>&1 | head -n 3)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deploy/images/assemble-rootfs.sh "$work/context" "$bin" "$ca_bundle"
rm -rf "$dir.partial"; mkdir -p "$dir.partial"
{
  echo "ORB_IMAGES_VERSION=$version"
  echo "ORB_IMAGES_KEY=$key"
} > "$dir.partial/images.env"
for name in "${names[@]}"; do
  image="localhost/$name:$version"
  buildah build --quiet --target "$name" --build-arg "VERSION=$version" -t "$image" \
    -f deploy/images/Containerfile.prebuilt "$work/context" >/dev/null
  mkdir -p "$dir.partial/$name/rootfs"
  buildah inspect --type image "$image" > "$dir.partial/$name/image.json"
  buildah inspect --type image --format '{{.FromImageID}}' "$image" > "$dir.partial/$name/image-id"
  buildah push --quiet "$image" "oci-archive:$dir.partial/$name.oci.tar:$image" >/dev/null
  container=$(buildah from --pull-never "$image")
  mount=$(buildah mount "$container")
  cp -a "$mount/." "$dir.partial/$name/rootfs/"
  buildah umount "$container" >/dev/null
  buildah rm "$container" >/dev/null
  var=$(echo "$name" | tr 'a-z-' 'A-Z_')
  {
    echo "ORB_IMAGE_${var}=$image"
    echo "ORB_IMAGE_${var}_BYTES=$(du -sb "$dir.partial/$name/rootfs" | cut -f1)"
    echo "ORB_IMAGE_${var}_ARCHIVE_BYTES=$(stat -c %s "$dir.partial/$name.oci.tar")"
  } >> "$dir.partial/images.env"
done
rm -rf "$dir"; mv "$dir.partial" "$dir"
touch "$dir/complete"
t2=$(date +%s)
# Keep the three newest image sets (each about the size of the two binaries, twice).
ls -1dt "$images_root"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "build-images: release build $((t1 - t0)) s, images $((t2 - t1)) s; $(grep _BYTES= "$dir/images.env" | tr '\n' ' ')" >&2
echo "$dir"
