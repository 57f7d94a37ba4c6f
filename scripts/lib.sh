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
    echo "==> installing ${missing[*]}" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The kernel tools the tests and the demo drive.
KERNEL_TOOLS=(iptables:iptables iptables-legacy:iptables ipset:ipset nft:nftables conntrack:conntrack ip:iproute2 tcpdump:tcpdump)

require_cargo() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed; install a Rust toolchain (1.89 or newer) with rustup first" >&2
    exit 1
  fi
}
