#!/bin/sh
# Installs fsrename from this checkout: the release binary, stripped, with its debug information
# beside it (`fsrename.debug`, which the binary names: a panic's backtrace reads file and line
# from it), shell completions and the manual pages.
#
#   ./install.sh                  # into ~/.cargo (bin/, share/man/man1/), as `cargo install`
#   PREFIX=/usr/local ./install.sh
#
# Completions go where each shell looks for a user's own: bash-completion's
# ${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions, fish's
# ${XDG_CONFIG_HOME:-~/.config}/fish/completions, and $PREFIX/share/zsh/site-functions for zsh
# (add it to `fpath` before `compinit`). `man fsrename` finds the pages through PATH.
set -eu
cd "$(dirname "$0")"
prefix="${PREFIX:-$HOME/.cargo}"
bin="$prefix/bin"

cargo build --locked --release -p fsrename
built=target/release/fsrename

mkdir -p "$bin"
# Made beside their final place under their final names (the binary records the debug file's
# name), then moved into place: a running fsrename keeps its old file.
work=$(mktemp -d "$bin/.fsrename-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
if command -v objcopy >/dev/null 2>&1; then
  objcopy --only-keep-debug --compress-debug-sections=zlib "$built" "$work/fsrename.debug"
  objcopy --strip-all --add-gnu-debuglink="$work/fsrename.debug" "$built" "$work/fsrename"
  mv "$work/fsrename.debug" "$bin/fsrename.debug"
else
  echo "install.sh: objcopy (binutils) not found: the binary keeps its debug information inside" >&2
  cp "$built" "$work/fsrename"
fi
mv "$work/fsrename" "$bin/fsrename"

data="${XDG_DATA_HOME:-$HOME/.local/share}"
config="${XDG_CONFIG_HOME:-$HOME/.config}"
mkdir -p "$data/bash-completion/completions" "$config/fish/completions" \
  "$prefix/share/zsh/site-functions" "$prefix/share/man/man1"
"$bin/fsrename" completions bash >"$data/bash-completion/completions/fsrename"
"$bin/fsrename" completions zsh >"$prefix/share/zsh/site-functions/_fsrename"
"$bin/fsrename" completions fish >"$config/fish/completions/fsrename.fish"
"$bin/fsrename" man --dir "$prefix/share/man/man1" >/dev/null

echo "installed $("$bin/fsrename" --version) as $bin/fsrename ($(wc -c <"$bin/fsrename") bytes)"
[ -f "$bin/fsrename.debug" ] && echo "  its debug information: $bin/fsrename.debug (keep it beside the binary)"
echo "  completions: bash, zsh ($prefix/share/zsh/site-functions: add it to fpath), fish"
echo "  manual: man fsrename ($prefix/share/man/man1)"
