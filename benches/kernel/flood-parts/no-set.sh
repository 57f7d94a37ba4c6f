# The same with one address (`! -s`) where the set match was: what the set match costs.
. "$(dirname "$0")/common.sh"
rules <<'RULES'
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 ! -s 198.51.100.10 -g npg-syn-denied
-A npg-syn-denied -j NFLOG --nflog-prefix "DPI1|a-guard" --nflog-group 1 --nflog-size 80 --nflog-threshold 1
-A npg-syn-denied -j DROP
RULES
