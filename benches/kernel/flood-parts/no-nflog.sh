# The same without the NFLOG rule: what logging the drop costs.
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
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 -m set ! --match-set flood-sources src -g npg-syn-denied
-A npg-syn-denied -j DROP
-I PREROUTING 1 -j npg-PREROUTING
COMMIT
RULES
