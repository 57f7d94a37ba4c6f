# Shared by the scripts beside it, each run as
# `cargo bench --bench kernel -- flood --backend iptables-nft --flood-script FILE`: the early
# drop's rules for the bench's whitelist as iptables-nft holds them, written by hand, so that
# each script can leave one part out.

# The decision table's set: the whitelist's three nets and the node's own address.
ipset create flood-sources hash:net family inet
for net in 198.51.100.1 198.51.100.10 198.51.100.12 203.0.113.0/28; do
  ipset add flood-sources "$net"
done

# Raw's npg-PREROUTING and npg-syn-denied, hooked at position 1 of PREROUTING, with the rules
# (and any further chain declarations) read from stdin.
rules() {
  {
    printf '*raw\n:npg-PREROUTING - [0:0]\n:npg-syn-denied - [0:0]\n'
    cat
    printf -- '-I PREROUTING 1 -j npg-PREROUTING\nCOMMIT\n'
  } | iptables-nft-restore --noflush
}
