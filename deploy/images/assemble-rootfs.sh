#!/bin/sh
# Lays out the files of the two runtime images, which have no shell, package manager or
# libraries: static binaries, CA roots, a non-root user (orb, 65532) and the directories a
# read-only root filesystem still needs. Both Containerfiles copy exactly this layout, so the
# image built with a registry and the one built offline (scripts/build-images.sh) are the same.
#
#   assemble-rootfs.sh OUT_DIR BIN_DIR CA_BUNDLE
#     BIN_DIR    holds the static `orb` and `pdb-operator` release binaries
#     CA_BUNDLE  a PEM bundle of CA roots (Debian: /etc/ssl/certs/ca-certificates.crt)
set -eu
[ $# -eq 3 ] || { echo "usage: $0 OUT_DIR BIN_DIR CA_BUNDLE" >&2; exit 2; }
out=$1 bin=$2 ca=$3
here=$(cd "$(dirname "$0")" && pwd)
for f in "$bin/orb" "$bin/pdb-operator" "$ca"; do
  [ -f "$f" ] || { echo "$0: $f is missing" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/common/etc/ssl/certs" "$out/common/tmp" "$out/orb-data" \
  "$out/orb/usr/local/bin" "$out/orb/var/lib" "$out/pdb-operator/usr/local/bin"
chmod 0755 "$out/common/etc" "$out/common/etc/ssl" "$out/common/etc/ssl/certs" "$out/orb-data" \
  "$out/orb/var" "$out/orb/var/lib"
for f in passwd group nsswitch.conf; do
  cp "$here/rootfs/etc/$f" "$out/common/etc/$f"
  chmod 0644 "$out/common/etc/$f"
done
cp "$ca" "$out/common/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$out/common/etc/ssl/certs/ca-certificates.crt"
# /tmp as in any image (the charts mount an emptyDir over it).
chmod 1777 "$out/common/tmp"
cp "$bin/orb" "$out/orb/usr/local/bin/orb"
cp "$bin/pdb-operator" "$out/pdb-operator/usr/local/bin/pdb-operator"
chmod 0755 "$out/orb/usr/local/bin/orb" "$out/pdb-operator/usr/local/bin/pdb-operator"
