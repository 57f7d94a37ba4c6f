# The same without the NFLOG rule: what logging the drop costs.
. "$(dirname "$0")/common.sh"
rules <<'RULES'
-A npg-PREROUTING ! -i lo -p tcp -m tcp --tcp-flags SYN,ACK SYN --dport 30008 -m set ! --match-set flood-sources src -g npg-syn-denied
-A npg-syn-denied -j DROP
RULES
