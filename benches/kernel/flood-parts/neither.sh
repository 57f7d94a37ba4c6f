# Neither set match nor NFLOG: the hook jump, `! -i lo` and the goto the floor does not have.
# For `cargo bench --bench kernel -- flood --backend iptables-nft --flood-script FILE`: the
# early drop's rules for the bench's whitelist as iptables-nft holds them, written by hand.
ipset create flood-sources hash:net family inet
for net in 198.51.100.1 198.51.100.10 198.51.100.12 203.0.113.0/28; do
  ipset add flood-sources "$net"
done
iptables-nft-restore --noflush <<'RULES'
*raw
:npg-PREROUTING - [0:0]
:npg-syn-denied - [0:0]
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 ! -s 198.51.100.10 -g npg-syn-denied
-A npg-syn-denied -j DROP
-I PREROUTING 1 -j npg-PREROUTING
COMMIT
RULES
