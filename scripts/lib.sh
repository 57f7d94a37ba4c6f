# Shared by scripts/test and scripts/demo: run as root (or with sudo), install what is missing.

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the Debian packages given as `command:package` pairs whose command is missing.
ensure_packages() {
  local missing=() pair command package
  for pair in "$@"; do
    command=${pair%%:*}
    package=${pair#*:}
    if ! command -v "$command" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$command" ] && ! [ -x "/sbin/$command" ]; then
      missing+=("$package")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    install_packages "${missing[@]}"
  fi
}

# Installs Debian packages.
install_packages() {
  echo "==> installing $*" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# A Docker Engine for tests/kernel_docker.rs: Debian's docker.io (dockerd, containerd, runc, the
# client) and a statically linked busybox for the image the tests import. The tests start the
# engine in their own namespaces; the package's service must never start on this host (it would
# rewrite the host's firewall), so a policy-rc.d forbids it while the packages install.
ensure_docker() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' ||
    missing+=(busybox-static)
  [ ${#missing[@]} -gt 0 ] || return 0
  local policy=/usr/sbin/policy-rc.d created="" status=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# nodeport-guard tests: no service starts while packages install\nexit 101\n' |
      as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    created=1
  fi
  install_packages "${missing[@]}" || status=$?
  if [ -n "$created" ]; then as_root rm -f "$policy"; fi
  return "$status"
}

# The kernel tools the tests and the demo drive.
KERNEL_TOOLS=(iptables:iptables iptables-legacy:iptables ipset:ipset nft:nftables conntrack:conntrack ip:iproute2 tcpdump:tcpdump)

# The Rust version Cargo.toml asks for.
RUST_MIN_VERSION=1.89

# Makes `cargo` (with clippy and rustfmt) available: the one on PATH or in ~/.cargo when it is
# recent enough, else a toolchain installed with rustup (rustup-init from static.rust-lang.org),
# with the C compiler and libc headers that linking needs.
ensure_rust() {
  ensure_packages cc:gcc curl:curl
  # gcc only recommends the libc headers; without them nothing links.
  if ! dpkg -s libc6-dev >/dev/null 2>&1; then
    install_packages libc6-dev
  fi
  if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    . "$HOME/.cargo/env"
  fi
  if ! command -v cargo >/dev/null 2>&1 || ! rust_is_recent; then
    if ! command -v rustup >/dev/null 2>&1; then
      echo "==> installing a Rust toolchain with rustup (into ~/.cargo and ~/.rustup)" >&2
      ensure_packages update-ca-certificates:ca-certificates
      local dir init
      dir=$(mktemp -d)
      # rustup-init tells what to do from the name it is run by.
      init=$dir/rustup-init
      curl --proto '=https' --tlsv1.2 -sSf -o "$init" \
        "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
      chmod +x "$init"
      "$init" -y --no-modify-path --profile minimal --default-toolchain stable \
        --component clippy,rustfmt >&2
      rm -rf "$dir"
      . "$HOME/.cargo/env"
    else
      # Too old a default toolchain: use a current one for this run only.
      rustup toolchain install stable --profile minimal --component clippy,rustfmt >&2
      export RUSTUP_TOOLCHAIN=stable
    fi
  fi
  if command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt >/dev/null 2>&1 || true
  fi
  if ! rust_is_recent; then
    echo "error: Rust $RUST_MIN_VERSION or newer is needed; found $(rustc --version 2>/dev/null || echo none)" >&2
    exit 1
  fi
}

# Whether rustc is at least RUST_MIN_VERSION.
rust_is_recent() {
  local version
  version=$(rustc --version 2>/dev/null | awk '{print $2}') || return 1
  [ -n "$version" ] && [ "$(printf '%s\n%s\n' "$RUST_MIN_VERSION" "$version" | sort -V | head -n1)" = "$RUST_MIN_VERSION" ]
}
