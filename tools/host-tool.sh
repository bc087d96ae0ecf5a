#!/bin/sh
# host-tool.sh PACKAGE WHAT ITEM...: make sure every ITEM is there (a command on PATH, or a file
# when it starts with /), installing Debian's
# PACKAGE with apt-get when one is missing and we are root (refreshing the package lists only
# when the first try fails). Without root or apt-get it says that the tests needing it (WHAT)
# will skip; it never fails the build, because those tests skip and say why on their own.
package=$1; what=$2; shift 2
missing=
for c in "$@"; do
  case $c in
    /*) [ -e "$c" ] || missing=1 ;;
    *) command -v "$c" >/dev/null 2>&1 || missing=1 ;;
  esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "$package missing: apt-get install $package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$package" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$package" >/dev/null; } \
    || echo "apt-get install $package failed: $what will skip"
else
  echo "$package missing (installing it needs root and apt-get): $what will skip"
fi
