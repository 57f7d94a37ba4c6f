# Neither set match nor NFLOG: the hook jump, `! -i lo` and the goto the floor does not have.
. "$(dirname "$0")/common.sh"
rules <<'RULES'
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 ! -s 198.51.100.10 -g npg-syn-denied
-A npg-syn-denied -j DROP
RULES
