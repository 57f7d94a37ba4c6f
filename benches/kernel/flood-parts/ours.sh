# The decision table's rule, its set match and its NFLOG rule, as nodeport-guard writes them.
. "$(dirname "$0")/common.sh"
rules <<'RULES'
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 -m set ! --match-set flood-sources src -g npg-syn-denied
-A npg-syn-denied -j NFLOG --nflog-prefix "DPI1|a-guard" --nflog-group 1 --nflog-size 80 --nflog-threshold 1
-A npg-syn-denied -j DROP
RULES
