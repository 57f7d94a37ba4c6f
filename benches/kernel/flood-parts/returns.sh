# One `-s … -j RETURN` rule per allowed source instead of the set match.
. "$(dirname "$0")/common.sh"
rules <<'RULES'
:npg-syn-table - [0:0]
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 -j npg-syn-table
-A npg-syn-table -s 198.51.100.1 -j RETURN
-A npg-syn-table -s 198.51.100.10 -j RETURN
-A npg-syn-table -s 198.51.100.12 -j RETURN
-A npg-syn-table -s 203.0.113.0/28 -j RETURN
-A npg-syn-table -g npg-syn-denied
-A npg-syn-denied -j NFLOG --nflog-prefix "DPI1|a-guard" --nflog-group 1 --nflog-size 80 --nflog-threshold 1
-A npg-syn-denied -j DROP
RULES
