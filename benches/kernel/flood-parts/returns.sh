# The table's rule with one `-s … -j RETURN` rule per allowed source instead of the set match.
# For `cargo bench --bench kernel -- flood --backend iptables-nft --flood-script FILE`: the
# early drop's rules for the bench's whitelist as iptables-nft holds them, written by hand.
iptables-nft-restore --noflush <<'RULES'
*raw
:npg-PREROUTING - [0:0]
:npg-syn-table - [0:0]
:npg-syn-denied - [0:0]
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 -j npg-syn-table
-A npg-syn-table -s 198.51.100.1 -j RETURN
-A npg-syn-table -s 198.51.100.10 -j RETURN
-A npg-syn-table -s 198.51.100.12 -j RETURN
-A npg-syn-table -s 203.0.113.0/28 -j RETURN
-A npg-syn-table -g npg-syn-denied
-A npg-syn-denied -j NFLOG --nflog-prefix "DPI1|a-guard" --nflog-group 1 --nflog-size 80 --nflog-threshold 1
-A npg-syn-denied -j DROP
-I PREROUTING 1 -j npg-PREROUTING
COMMIT
RULES
