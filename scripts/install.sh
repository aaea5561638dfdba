#!/bin/sh
# Install leasehold's static binaries (`leasehold` and `leasehold-guard`)
# for this machine from a release: a directory or a base URL holding the
# archives and their SHA256SUMS (what scripts/dist makes).
#
#   sh install.sh --from https://example.org/leasehold/v0.1.0
#   sh install.sh --from ./target/dist           # a local directory
#   LEASEHOLD_INSTALL_DIR=/usr/local/bin sh install.sh --from ...
#
# It installs into $LEASEHOLD_INSTALL_DIR, else ~/.local/bin. The archive
# is checked against SHA256SUMS before anything is unpacked: a mismatch,
# a missing sum or a missing archive installs nothing (exit 1). Without
# --from it looks in the directory it was run from.
set -eu

say() { printf 'install.sh: %s\n' "$*" >&2; }
fail() {
    say "$*"
    exit 1
}

from=
while [ $# -gt 0 ]; do
    case $1 in
    --from)
        [ $# -ge 2 ] || fail "--from needs a directory or a URL"
        from=$2
        shift 2
        ;;
    --from=*)
        from=${1#--from=}
        shift
        ;;
    -h | --help)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) fail "unknown argument $1 (see --help)" ;;
    esac
done
[ -n "$from" ] || from=$(cd "$(dirname "$0")" && pwd)

case $(uname -s) in
Linux) ;;
*) fail "the release archives are for Linux; on $(uname -s), build from source: cargo install --locked leasehold-cli" ;;
esac
case $(uname -m) in
x86_64 | amd64) triple=x86_64-unknown-linux-musl ;;
aarch64 | arm64) triple=aarch64-unknown-linux-musl ;;
*) fail "no release archive for $(uname -m); build from source: cargo install --locked leasehold-cli" ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# fetch NAME: NAME from the release into $tmp.
fetch() {
    case $from in
    http://* | https://*)
        if command -v curl >/dev/null 2>&1; then
            curl --proto '=https,http' -fsSL -o "$tmp/$1" "$from/$1" || fail "could not download $from/$1"
        elif command -v wget >/dev/null 2>&1; then
            wget -q -O "$tmp/$1" "$from/$1" || fail "could not download $from/$1"
        else
            fail "neither curl nor wget is here to download $from/$1"
        fi
        ;;
    *)
        [ -f "$from/$1" ] || fail "$from/$1 does not exist"
        cp "$from/$1" "$tmp/$1"
        ;;
    esac
}

fetch SHA256SUMS
# The archive of this machine's target, named in the sums.
archive=$(sed -n "s/^[0-9a-f]\{64\}  \(leasehold-[^ /]*-$triple\.tar\.gz\)\$/\1/p" "$tmp/SHA256SUMS" | head -1)
[ -n "$archive" ] || fail "SHA256SUMS at $from names no archive for $triple"
fetch "$archive"
want=$(grep "  $archive\$" "$tmp/SHA256SUMS" | cut -d' ' -f1)
if command -v sha256sum >/dev/null 2>&1; then
    got=$(sha256sum "$tmp/$archive" | cut -d' ' -f1)
else
    got=$(shasum -a 256 "$tmp/$archive" | cut -d' ' -f1)
fi
[ "$got" = "$want" ] || fail "$archive does not match its SHA256SUMS line (got $got, want $want): not installed; download it again"

dir=${LEASEHOLD_INSTALL_DIR:-$HOME/.local/bin}
mkdir -p "$dir"
tar -xzf "$tmp/$archive" -C "$tmp"
name=${archive%.tar.gz}
for bin in leasehold leasehold-guard; do
    [ -f "$tmp/$name/$bin" ] || fail "$archive has no $name/$bin"
    # A new file renamed over the old one: a running leasehold keeps its
    # binary, and a half-copied file is never on PATH.
    cp "$tmp/$name/$bin" "$dir/.$bin.new"
    chmod 755 "$dir/.$bin.new"
    mv -f "$dir/.$bin.new" "$dir/$bin"
done
say "installed $("$dir/leasehold" --version | head -1) into $dir"
# The manual pages and the completions beside a bin/ directory, where man
# and bash-completion look (~/.local/bin: ~/.local/share/...); zsh's and
# fish's directories there are said, not set up.
prefix=${dir%/bin}
if [ "$prefix" != "$dir" ] && [ -d "$tmp/$name/man/man1" ]; then
    share=$prefix/share
    mkdir -p "$share/man/man1" "$share/bash-completion/completions" "$share/zsh/site-functions" "$share/fish/vendor_completions.d"
    cp "$tmp/$name"/man/man1/*.1 "$share/man/man1/"
    cp "$tmp/$name/completions/leasehold.bash" "$share/bash-completion/completions/leasehold"
    cp "$tmp/$name/completions/_leasehold" "$share/zsh/site-functions/_leasehold"
    cp "$tmp/$name/completions/leasehold.fish" "$share/fish/vendor_completions.d/leasehold.fish"
    say "manual pages into $share/man/man1 (man leasehold), completions into $share: bash-completion finds them; zsh: fpath+=($share/zsh/site-functions); fish: $share/fish/vendor_completions.d"
else
    say "$dir is not a bin/ directory: the manual pages and completions stay in the archive ($name/man, $name/completions)"
fi
case ":$PATH:" in
*":$dir:"*) ;;
*) say "$dir is not on PATH; add it: export PATH=\"$dir:\$PATH\"" ;;
esac
